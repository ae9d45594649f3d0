"""The dashboard's pages, one module per room: the workspace pages, a layout's pages,
its rollouts, runs, proposals and the decisions on them, entries, versions, the summary
editor, skills, export and write-back, members, tokens, webhooks, the snapshot store's
policy, the audit log; ``common`` holds what they share. Routes are in
``memoryui.urls``; forms in ``memoryui.forms``."""
