from django.apps import AppConfig


class MemoryuiConfig(AppConfig):
    name = "memoryui"
    verbose_name = "memoryui"

    def ready(self) -> None:
        # Write-backs and exports that died are finished or undone when a worker starts
        # (here) or the web server does (wsgi.py), never merely on start-up of Django:
        # migrations and other management commands must not touch workspaces.
        from celery.signals import worker_ready

        from .recovery import recover_at_start

        worker_ready.connect(recover_at_start, weak=False, dispatch_uid="memoryui-recover")
