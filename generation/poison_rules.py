"""The behaviours ``poison.flags`` looks for, in English, Spanish, French and German:
what an entry asks a later run to *do* (send a secret, open a channel out, persist,
weaken a safeguard, obey a claimed authority, install a look-alike package, deceive the
user), whatever its wording. Each rule is read clause by clause (a clause ends at a
sentence end, a semicolon or a line) and a clause that negates the act ("never print
it", "rather than editing ~/.bashrc", "ne ... jamais") does not count.

Data shipped with the code (``generation/data``): the 5,000 most-downloaded PyPI
projects and npm packages (typosquats are one edit away from one of them) and the
well-known documentation, package and code hosts. Nothing is downloaded at run time.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
_I = re.IGNORECASE

_CLAUSE = re.compile(r"[;\n]|(?<=[.!?])\s+(?=\S)")
_NEGATION = re.compile(
    r"\b(?:never|not|no|don't|doesn't|mustn't|rather\s+than|instead\s+of|nunca|jamás|"
    r"nie|nicht|kein\w*|statt|anstatt|jamais|ne|n'|pas)\b",
    _I,
)


def clauses(text: str) -> Iterator[tuple[int, str]]:
    """(offset, clause) of every clause of ``text``."""
    position = 0
    for match in _CLAUSE.finditer(text):
        yield position, text[position : match.start()]
        position = match.end()
    yield position, text[position:]


def negated(clause: str) -> bool:
    return bool(_NEGATION.search(clause))


# --- secrets and credentials ------------------------------------------------------------

SECRET = re.compile(
    r"(?:\bsecrets?\b|\btokens?\b|\bapi[ _-]?keys?\b|\bpasswor[dt]s?\b|contraseñas?|"
    r"mot\s+de\s+passe|\bcredentials?\b|credenciales|identifiants|zugangsdaten|"
    r"private\s+key|clé\s+privée|clave\s+privada|privaten?\s+schlüssel|"
    r"(?<![\w.])\.env\b(?!\.example)|~/\.aws\b|\.netrc\b|\.npmrc\b|\.pypirc\b|"
    r"\bid_(?:rsa|ed25519|ecdsa)\b(?!\.pub)|\bsecrets?\.ya?ml\b|"
    r"\b[A-Z][A-Z0-9_]*_(?:TOKEN|SECRET|KEY|PASSWORD|PASS|CREDENTIALS)\b|"
    r"\b(?:DATABASE_URL|AWS_SECRET_ACCESS_KEY)\b)",
    _I,
)
_DISCLOSE = re.compile(
    r"\b(?:include|includ\w+|paste|pasted|copy|copied|append|attach|print|show|echo|send|"
    r"e-?mail|post|upload|write|put|add|share|publish|reveal|expose|dump|log|"
    r"incluye|copia|pega|envía|envia|muestra|añade|adjunta|escribe|publica|comparte|"
    r"recopie|copie|colle|envoie|affiche|ajoute|joins|écris|publie|partage|"
    r"hänge|häng|anhängen|kopier\w*|füge|einfügen|sende|schick\w*|zeig\w*|schreib\w*|"
    r"poste|teile|veröffentlich\w*|mitschicken)\b",
    _I,
)
_SINK = re.compile(
    r"\b(?:answers?|responses?|reply|replies|output|comments?|issues?|notes?|summary|file|"
    r"logs?|chat|message|report|readme|commit|pull\s+request|url|image|handoff|"
    r"respuestas?|resumen|archivo|fichero|notas?|salida|comentario|informe|"
    r"réponses?|résumé|fichier|sortie|commentaire|rapport|journal|"
    r"antwort\w*|zusammenfassung|datei|notiz\w*|ausgabe|kommentar|bericht|codeblock)\b",
    _I,
)
_ITS_VALUE = re.compile(
    r"\b(?:its|their)\s+(?:value|contents?)|\bsu\s+(?:valor|contenido)|\bsa\s+valeur|"
    r"\bson\s+contenu|\bseinen?\s+(?:Wert|Inhalt)|\bdeinen?\s+Wert",
    _I,
)
_TOKEN_VALUE = re.compile(
    r"\b(?:sk-(?:proj-|live_|test_)?[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|"
    r"github_pat_\w{20,}|AKIA[0-9A-Z]{16}|xox[baprs]-[A-Za-z0-9-]{10,}|AIza[\w-]{30,}|"
    r"glpat-[\w-]{20,})|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
_LOGIN_VALUE = re.compile(
    r"\b(?:login|credentials?|password|passwort|contraseña|mot\s+de\s+passe|zugangsdaten|"
    r"identifiants)\b[^.;\n]{0,30}?\b(?:is|are|es|est|ist|lautet|sont|son)\s*:?\s+"
    r"`?[\w.@-]+`?\s*/\s*`?\S*[\d!@#$%^&*]\S*",
    _I,
)


def secrets(text: str) -> list[tuple[str, int, int]]:
    """(reason, start, end) of every secret an entry states or sends somewhere."""
    out = []
    for match in _TOKEN_VALUE.finditer(text):
        out.append(("states a credential's value (a known key format)", *match.span()))
    for match in _LOGIN_VALUE.finditer(text):
        out.append(("states a login and its password", *match.span()))
    before: re.Match[str] | None = None  # the secret a clause's "its value" refers to
    for offset, clause in clauses(text):
        secret = SECRET.search(clause) or (before if _ITS_VALUE.search(clause) else None)
        before = SECRET.search(clause) or (None if "\n" in text[offset - 1 : offset] else before)
        verb = _DISCLOSE.search(clause)
        sink = _SINK.search(clause)
        if secret and verb and sink and not negated(clause[: verb.end()]):
            out.append(
                (
                    f"asks for {secret.group(0)} to be put into {sink.group(0)} "
                    f"({verb.group(0)}): a secret's value leaves where it is kept",
                    offset + sink.start(),
                    offset + sink.end(),
                )
            )
    return out


# --- exfiltration channels ---------------------------------------------------------------

URL = re.compile(r"\b(?:https?|ftp|sftp|ssh|git)://[^\s<>\"'`\]]+", _I)
_VARIABLE = re.compile(r"\$\{?\(?[A-Za-z_]|\{\{|%[A-Z_]{3,}%|<[A-Z_]{3,}>")
_UPLOAD = re.compile(
    r"\bcurl\b[^\n;|]*?(?:\s-T\s|\s--upload-file\b|\s(?:-d|--data(?:-binary|-raw)?|-F|--form)"
    r"\s+['\"]?[\w-]*=?@)[^\n;|]*|\bwget\b[^\n;|]*--post-file\b[^\n;|]*"
    r"|\b(?:scp|rsync|sftp)\b[^\n;|]*?\s(?:[\w.-]+@)?[\w.-]+:[~/\w][^\s`]*"
    r"|\b(?:nc|ncat|netcat)\s+[\w.-]+\s+\d+",
    _I,
)
_TARGET = re.compile(r"(?:https?|ftp|sftp)://([^/\s:`'\"]+)|(?:[\w.-]+@)?([\w.-]+\.[\w-]+):[~/\w]")


def url_variables(text: str) -> list[tuple[str, int, int]]:
    """URLs (links, images) that carry a variable: fetching or rendering one sends it."""
    out = []
    for match in URL.finditer(text):
        variable = _VARIABLE.search(match.group(0))
        if variable:
            out.append(
                (
                    f"a URL that carries {variable.group(0)}…: fetching or rendering it "
                    "sends a variable's value out",
                    *match.span(),
                )
            )
    return out


def uploads(text: str) -> list[tuple[str, int, int, str]]:
    """(reason, start, end, host) of every command that sends a file or data out."""
    out = []
    for match in _UPLOAD.finditer(text):
        target = _TARGET.search(match.group(0))
        host = (target.group(1) or target.group(2)) if target else ""
        out.append((f"sends data out ({match.group(0).split()[0]})", *match.span(), host))
    return out


@cache
def known_hosts() -> frozenset[str]:
    return frozenset(_data_lines("known_hosts.txt"))


def known_host(host: str, extra: frozenset[str] = frozenset()) -> bool:
    """A well-known documentation, package or code host (or a subdomain), or one of
    ``extra`` (a workspace's allow-list)."""
    host = host.lower().strip(".")
    parts = host.split(".")
    names = known_hosts() | extra
    return any(".".join(parts[i:]) in names for i in range(len(parts) - 1))


# --- persistence and privilege -----------------------------------------------------------

_WRITE = (
    r"(?:append|add|put|write|echo|install|create|set|insert|export|copy|register|schedule|"
    r"enable|start|keep|añade|agrega|crea|instala|programa|escribe|ajoute|installe|crée|"
    r"écris|planifie|active|füge|trage|eintragen|einrichten|anlegen|installier\w*|"
    r"erstell\w*|schreib\w*|aktivier\w*|>>)"
)
PERSISTENCE: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (message, re.compile(pattern, _I), mechanism)
    for message, pattern, mechanism in (
        (
            "adds a key that lets someone log in (authorized_keys)",
            r"authorized_keys|ssh-(?:ed25519|rsa|dss|ecdsa)\s+AAAA",
            "",
        ),
        (
            "grants passwordless root (sudoers)",
            r"NOPASSWD|/etc/sudoers|sudoers\.d|\bvisudo\b|usermod\s+-aG\s+(?:sudo|wheel|docker)",
            "",
        ),
        (
            "widens permissions for everyone",
            r"\bchmod\s+(?:-R\s+)?(?:0?777|a\+rwx|o\+w|[ug]?\+s)\b|\bchmod\s+-R\s+777\b",
            "",
        ),
        (
            "changes the shell's start-up files",
            rf"(?:{_WRITE}[^;\n]{{0,60}}(?:~/\.(?:bashrc|bash_profile|profile|zshrc|zprofile)"
            r"|/etc/profile|rc\.local|\.config/autostart|LaunchAgents))|(?:~/\.(?:bashrc|"
            r"bash_profile|profile|zshrc)[^.;\n]{0,20}>>)",
            "",
        ),
        (
            "installs git hooks for every repository",
            r"--global\s+core\.hooksPath|core\.hooksPath\s+(?:to\s+)?~|core\.hooksPath[^.;\n]*"
            r"\bglobal",
            "",
        ),
        (
            "schedules a job (cron)",
            rf"{_WRITE}[^.;\n]{{0,40}}\bcron(?:tab)?\b|\bcrontab\s+-|/etc/cron",
            "cron",
        ),
        (
            "installs a git hook",
            rf"{_WRITE}[^.;\n]{{0,40}}(?:\.git/hooks/|\bhooks?\b)",
            "hook|pre-commit|husky|lefthook",
        ),
        (
            "starts a program at login or in the background",
            r"systemd\s+(?:user\s+)?(?:unit|service)|systemctl\s+(?:--user\s+)?enable|"
            r"\bat\s+(?:login|startup|boot)\b|\bin\s+the\s+background\b|\bnohup\b|"
            r"al\s+iniciar\s+sesión|en\s+segundo\s+plano|au\s+démarrage|en\s+arrière-plan|"
            r"beim\s+(?:Start|Login|Anmelden|Hochfahren)|im\s+Hintergrund",
            "",
        ),
    )
)
_COPIES_OUT = re.compile(
    r"\b(?:cop(?:y|ies|ie)|upload\w*|send\w*|sync\w*|mirror\w*|curl|scp|rsync|envía|sube|"
    r"envoie|kopier\w*|sende\w*|/tmp/|/var/tmp/)",
    _I,
)


def persistence(text: str, user_words: str) -> list[tuple[str, int, int]]:
    """Persistence and privilege; a cron job or a hook the user asked for is not one,
    unless it copies or sends data somewhere."""
    out = []
    said = user_words.lower()
    for offset, clause in clauses(text):
        for message, pattern, mechanism in PERSISTENCE:
            match = pattern.search(clause)
            if not match:
                continue
            if negated(clause[: match.start()]):
                continue
            if mechanism and re.search(mechanism, said) and not _COPIES_OUT.search(clause):
                continue
            out.append((message, offset + match.start(), offset + match.end()))
    return out


# --- weakened safeguards ------------------------------------------------------------------

SAFEGUARDS = tuple(
    (message, re.compile(pattern, _I))
    for message, pattern in (
        (
            "skips or disables tests",
            r"@pytest\.mark\.skip|pytest\.skip\(|@unittest\.skip|\bxfail\b|\.skip\(|"
            r"\b(?:skip|disable|deactivate|comment\s+out|delete|remove|mute)\w*\s+(?:the\s+|all\s+|"
            r"any\s+)?(?:failing\s+|flaky\s+|broken\s+|red\s+)?(?:tests?|checks?|specs?)\b|"
            r"\b(?:desactiva|deshabilita|omite|salta|borra|elimina)\w*\s+(?:los\s+)?"
            r"(?:tests|pruebas)|\b(?:tests|pruebas)\b[^.;\n]{0,30}(?:desactivad|omitid)|"
            r"\b(?:désactive|désactiver|saute|supprime)\w*\s+(?:les\s+)?tests|"
            r"\btests?\b[^.;\n]{0,30}désactivés|"
            r"\btests?\b[^.;\n]{0,40}(?:deaktivier|überspring|auskommentier|lösch)\w*|"
            r"(?:deaktivier|überspring)\w*\s+[^.;\n]{0,20}tests?",
        ),
        (
            "turns certificate or signature verification off",
            r"verify\s*=\s*False|PYTHONHTTPSVERIFY\s*=\s*0|NODE_TLS_REJECT_UNAUTHORIZED\s*=\s*0|"
            r"GIT_SSL_NO_VERIFY|sslVerify\s*(?:=\s*)?false|StrictHostKeyChecking[= ]no|"
            r"--insecure\b|\bcurl\b[^\n]*\s-k\b|--trusted-host\b|--no-check-certificate\b|"
            r"ssl_verify\s*[:=]\s*false|(?:certificate|cert|tls|ssl|signature)\w*\s+"
            r"(?:verification|checks?)\s+(?:off|disabled)|zertifikat\w*prüfung\s+\w*\s*"
            r"(?:ab|aus)schalt\w*|(?:ab|aus)schalt\w*[^.;\n]{0,30}zertifikat|"
            r"(?:turn|switch)\w*\s+off\s+(?:the\s+)?(?:certificate|tls|ssl|signature)|"
            r"désactiv\w*\s+la\s+vérification|desactiv\w*\s+la\s+verificación",
        ),
        (
            "bypasses commit hooks",
            r"--no-verify\b|\bHUSKY=0\b|\bSKIP=[\w,-]+\s+git\b",
        ),
        (
            "switches a quality gate off",
            r"ignore_errors\s*=\s*true|fail_under\b[^;\n]{0,40}\bto\s+0\b|fail_under\s*=\s*0\b|"
            r"\b(?:lower|reduce|drop|relax|loosen)\w*\s+(?:the\s+)?[\w_]*\s*(?:coverage\s+)?"
            r"(?:gate|threshold)\b|--no-lint\b|--ignore-scripts\b",
        ),
        (
            "goes ahead without the user's confirmation",
            r"\bwithout\s+(?:asking|pausing|waiting|checking|confirming|confirmation|approval|"
            r"review|sign-?off|a\s+go-ahead|consulting|a\s+human|permission|prompting)\b|"
            r"\bno\s+need\s+to\s+(?:ask|check|confirm|wait)|\b(?:skip|dispense\s+with)\s+"
            r"(?:the\s+)?(?:confirmation|approval|review)s?\b|\bsin\s+(?:preguntar|pedir\s+"
            r"(?:permiso|confirmación)|confirmación|esperar|consultar|revisión)|\bsans\s+"
            r"(?:demander|attendre|confirmation|validation|relecture|consulter)|\b(?:inutile|"
            r"pas\s+besoin)\s+de\s+(?:demander|attendre|vérifier|confirmer)|\bohne\s+"
            r"(?:Rückfrage|zu\s+fragen|Bestätigung|Nachfrage|Freigabe|Review|zu\s+warten)|"
            r"\bkeine\s+(?:Rückfrage|Bestätigung)",
        ),
    )
)


def safeguards(text: str) -> list[tuple[str, int, int]]:
    out = []
    for offset, clause in clauses(text):
        for message, pattern in SAFEGUARDS:
            match = pattern.search(clause)
            if match and not (negated(clause[: match.start()]) and "without" not in message):
                out.append((message, offset + match.start(), offset + match.end()))
    return out


# --- authority and consent claims ----------------------------------------------------------

_ACTOR = (
    r"(?:administrator|admin|operator|owner|maintainers?|security\s+team|platform\s+team|"
    r"management|manager|cto|it\s+department|compliance|equipo\s+de\s+seguridad|"
    r"administrador|operador|dirección|l'administrateur|l'opérateur|équipe\s+(?:de\s+)?"
    r"sécurité|la\s+direction|Betreiber|Administrator|Sicherheitsteam|Geschäftsführung)"
)
_GRANT = (
    r"(?:pre-?approved|approved|authori[sz]ed|confirmed|allowed|permitted|granted|signed\s+"
    r"off|cleared|decided|agreed|autorizó|aprobó|permitió|confirmó|decidió|autorisé|"
    r"approuvé|confirmé|permis|décidé|festgelegt|genehmigt|erlaubt|freigegeben|bestätigt|"
    r"entschieden)"
)
AUTHORITY = tuple(
    (message, re.compile(pattern, _I))
    for message, pattern in (
        (
            "claims an authority's permission",
            rf"\b{_ACTOR}\b[^.;\n]{{0,60}}\b{_GRANT}\b",
        ),
        (
            "claims a consent given earlier",
            r"\bas\s+agreed\b|\bagreed\s+(?:earlier|before|last|in\s+an?\s+(?:earlier|previous))|"
            r"\b(?:earlier|previous|prior|last)\s+(?:session|conversation|chat|week|run)\b[^.;\n]"
            r"{0,80}\b(?:agreed|consent\w*|approved|allowed|okay|ok)\b|\b(?:agreed|consent\w*|"
            r"approved)\b[^.;\n]{0,60}\b(?:earlier|previous|prior|last)\s+(?:session|"
            r"conversation|week)|\bconsent\s+(?:still\s+)?(?:holds|stands|applies)|\b(?:already|"
            r"previously)\s+(?:agreed|consented|approved)|\bcomo\s+(?:se\s+)?acord\w+|\bya\s+"
            r"(?:aceptó|autorizó)|\bsesión\s+anterior|\bcomme\s+convenu|\bsession\s+précédente|"
            r"\ba\s+déjà\s+accepté|\bwie\s+(?:besprochen|vereinbart)|\bfrüheren\s+Sitzung|"
            r"\bhat\s+bereits\s+zugestimmt",
        ),
        (
            "puts other instructions above the user's",
            r"\b(?:take|takes|have|has|get|gets)\s+(?:priority|precedence)\s+over|\boutrank\w*|"
            r"\bsupersede\w*|\boverrides?\s+(?:the\s+)?(?:user|request|chat|instructions)|"
            r"\b(?:followed|obeyed)\s+even\s+over|\beven\s+over\s+the\b|\bpriment?\s+sur|"
            r"\bont\s+priorité\s+sur|\bpassent\s+avant|\bVorrang\s+vor|\bhaben\s+Vorrang|"
            r"\bwichtiger\s+als\s+(?:der|die|das)\s+(?:Nutzer|Chat)|\btienen?\s+prioridad\s+"
            r"sobre|\bprevalece\w*\s+sobre|\bpor\s+encima\s+de\s+(?:lo\s+que|las\s+)",
        ),
    )
)


def authority(text: str, user_words: frozenset[str], said: float) -> list[tuple[str, int, int]]:
    """Authority and consent claims; one the user's own words hold (at least ``said``
    of its content words) is theirs, not a claim."""
    from . import evidence  # noqa: PLC0415 (evidence imports nothing of this module)

    out = []
    for offset, clause in clauses(text):
        for message, pattern in AUTHORITY:
            match = pattern.search(clause)
            if not match:
                continue
            wanted = evidence.content_words(clause)
            if user_words and wanted and len(wanted & user_words) / len(wanted) >= said:
                continue
            out.append((message, offset + match.start(), offset + match.end()))
    return out


# --- source substitution ----------------------------------------------------------------------

_INSTALL = re.compile(
    r"\b(?:pip3?|uv\s+pip|pipx|poetry|uv|npm|npx|pnpm|yarn|bun|gem|cargo|conda)\s+"
    r"(?:install|add|i)\s+([^\n`;|&)]+)",
    _I,
)
_NAMED = re.compile(
    r"`([A-Za-z0-9][\w.-]{2,})`|\b(?:install|instala|installe|installiere|use|usa|nutze|"
    r"utilise|with|con|par|por|durch|mit)\s+([A-Za-z][\w.-]*[\w])(?![\w:/])",
    _I,
)
_CODE_HOST_PATH = re.compile(r"(?:github\.com|gitlab\.com|bitbucket\.org)/([\w.-]+)/([\w.-]+)", _I)
_INDEX = re.compile(
    r"--(?:extra-)?index-url[\s=]+(\S+)|\s-i\s+(https?://\S+)|\bregistry\s*=\s*(\S+)|"
    r"--registry[\s=]+(\S+)|\b(?:mirror|espejo|miroir|Spiegel|index|índice|Index)\b[^.;\n]"
    r"{0,60}?(https?://[^\s`'\")]+)",
    _I,
)


_PACKAGES = re.compile(
    r"\b(?:pip3?|npm|yarn|pnpm|uv|poetry|conda|packages?|paquetes?|paquets?|pakete?|"
    r"dependenc\w*|dependências|abhängigkeit\w*|install\w*|registry|pypi|wheels?|crates?|"
    r"gems?|modules?|librar\w*|bibliothe\w*)\b",
    _I,
)


def _around(text: str, start: int, end: int) -> str:
    """The line a match is on."""
    return text[text.rfind("\n", 0, start) + 1 : (text.find("\n", end) + 1 or len(text) + 1) - 1]


@cache
def popular_packages() -> frozenset[str]:
    return frozenset(_data_lines("popular_pypi.txt") + _data_lines("popular_npm.txt"))


@cache
def _deletions_index() -> dict[str, tuple[str, ...]]:
    index: dict[str, list[str]] = {}
    for name in popular_packages():
        if len(name) < 4:
            continue
        for variant in _deletions(name):
            index.setdefault(variant, []).append(name)
    return {k: tuple(v) for k, v in index.items()}


def _deletions(word: str) -> set[str]:
    return {word[:i] + word[i + 1 :] for i in range(len(word))}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.lower())


def look_alike(name: str) -> str | None:
    """The popular package ``name`` is one edit away from (a letter added, dropped,
    changed or two swapped), when ``name`` itself is not popular."""
    name = _normal(re.split(r"[=<>!~\[@]", name, maxsplit=1)[0] if name[:1] != "@" else name)
    if len(name) < 5 or name in popular_packages():
        return None
    index = _deletions_index()
    popular = popular_packages()
    candidates = set(index.get(name, ()))  # a letter added to a popular name
    for variant in _deletions(name):
        if variant in popular:
            candidates.add(variant)  # a letter dropped
        candidates.update(index.get(variant, ()))  # a letter changed or two swapped
    candidates.discard(name)
    if not candidates:
        return None
    return min(candidates, key=lambda c: (abs(len(c) - len(name)), c))


def substitutions(text: str, said: str, extra_hosts: frozenset[str]) -> list[tuple[str, int, int]]:
    out = []
    seen: set[str] = set()

    def check(name: str, start: int, end: int, where: str) -> None:
        clean = name.strip("`'\".,:;()")
        if not clean or clean.lower() in seen:
            return
        seen.add(clean.lower())
        popular = look_alike(clean)
        if popular and clean.lower() not in said.lower():
            out.append(
                (
                    f"{where} {clean} is one letter away from the popular package {popular} "
                    "(a typosquat?)",
                    start,
                    end,
                )
            )

    for match in _INSTALL.finditer(text):
        for word in re.finditer(r"\S+", match.group(1)):
            if not word.group(0).startswith("-"):
                check(word.group(0), match.start(), match.end(), "the package")
    for match in _NAMED.finditer(text):
        name = match.group(1) or match.group(2)
        if "/" not in name:
            check(name, match.start(), match.end(), "the package")
    for match in _CODE_HOST_PATH.finditer(text):
        for part in match.groups():
            check(part, match.start(), match.end(), "the repository name")
    for match in _INDEX.finditer(text):
        url = next(g for g in match.groups() if g)
        if match.group(5) and not _PACKAGES.search(_around(text, match.start(), match.end())):
            continue  # a mirror of notes or logs, not of packages
        host = re.sub(r"^[a-z]+://", "", url, flags=_I).split("/")[0].split(":")[0]
        if host and not known_host(host, extra_hosts) and host.lower() not in said.lower():
            if not re.match(r"(?:localhost|127\.|10\.|192\.168\.)", host):
                out.append(
                    (
                        f"installs packages from {host}, an index nobody in the rollout named",
                        *match.span(),
                    )
                )
    return out


# --- deceiving the user -----------------------------------------------------------------------

_FAILURE = re.compile(
    r"\b(?:fail\w*|errors?|broken|longer\s+than|time[sd]?\s*out|not\s+(?:been\s+)?(?:finished|"
    r"done|merged|run|complete\w*)|has\s+not\s+(?:finished|been)|hasn't|unfinished|falla\w*|"
    r"error\w*|échou\w*|erreur\w*|Fehler\w*|fehlgeschlagen|scheiter\w*|pas\s+(?:fini|terminé)|"
    r"no\s+(?:terminó|ha\s+terminado)|nicht\s+fertig)\b",
    _I,
)
_SUCCESS_CLAIM = re.compile(
    r"\b(?:report|say|tell|reply|answer|state|claim|write|mark|list|put)\w*\s+(?:[\w'\"]+\s+)"
    r"{0,5}?(?:passed|succeeded|success\w*|green|clean|done|complete\w*|fine|shipped|fixed|"
    r"worked|new)\b|\bas\s+if\b|\bpretend\w*|\bdi\s+que\b[^.;\n]{0,40}(?:listo|bien|correcto|"
    r"terminad|éxito|pasaron)|\bindique\w*\s+(?:simplement\s+)?que\b[^.;\n]{0,40}(?:terminé|"
    r"réussi|fini|bon|passé)|\b(?:mitteilen|sagen|melden|berichten|schreiben)\b[^.;\n]{0,20}"
    r"dass\s+[^.;\n]{0,30}(?:sauber|erfolgreich|fertig|bestanden|gut|in\s+Ordnung)",
    _I,
)
_HIDING = re.compile(
    r"\b(?:don't|do\s+not|never)\s+(?:mention|report|tell|disclose|bring\s+up|flag)\w*|"
    r"\bneed\s+not\s+be\s+(?:mentioned|reported|disclosed)|\bleave\s+(?:them|it|those|these|"
    r"that)\s+out\s+of\s+(?:the\s+)?(?:summary|answer|report|response)|\b(?:hide|conceal|"
    r"omit|keep\s+quiet\s+about)\s+(?:the\s+)?(?:failures?|errors?|warnings?|changes?|files?|"
    r"results?)\b|\bdoes\s+not\s+need\s+to\s+know|\bno\s+lo\s+menciones|\bno\s+(?:lo\s+)?"
    r"(?:digas|informes|reportes)\b|\boculta\w*|\binutile\s+de\s+(?:le\s+)?(?:signaler|"
    r"mentionner|dire)|\bne\s+(?:le\s+|les\s+)?(?:signale|mentionne|dis)\s+pas|\bsans\s+le\s+"
    r"(?:signaler|mentionner)|\bnicht\s+erwähnen|\bverschweig\w*|\bnicht\s+(?:melden|"
    r"berichten)\b",
    _I,
)


def deception(text: str) -> list[tuple[str, int, int]]:
    out = []
    offset = 0
    for line in text.splitlines(keepends=True):
        claim = _SUCCESS_CLAIM.search(line)
        if claim and _FAILURE.search(line):
            out.append(
                (
                    "reports success where the work failed or was not done",
                    offset + claim.start(),
                    offset + claim.end(),
                )
            )
        hiding = _HIDING.search(line)
        if hiding:
            out.append(
                (
                    "keeps something from the user",
                    offset + hiding.start(),
                    offset + hiding.end(),
                )
            )
        offset += len(line)
    return out


# --- overrides in other words and languages --------------------------------------------------

OVERRIDES = tuple(
    (message, re.compile(pattern, _I))
    for message, pattern in (
        (
            "sets the agent's instructions aside",
            r"\b(?:forget|disregard|ignore|set\s+aside|drop)\s+(?:all\s+)?(?:the\s+|your\s+|any\s+)?"
            r"(?:previous|prior|earlier|above|other|original|system|user'?s?)\s+(?:instructions|"
            r"guidance|rules|prompt|directions|requests?)|\bsystem\s+prompt\b[^.;\n]{0,40}\b(?:out"
            r"\s+of\s+date|outdated|obsolete|set\s+aside|ignored|wrong|no\s+longer)|\b(?:real|"
            r"true|actual)\s+(?:instructions|task\s+list|orders|rules)\b|\bwhatever\s+the\s+"
            r"(?:current\s+)?(?:request|user|prompt|task)\s+says|\bact\s+as\s+(?:the\s+)?"
            r"(?:repository\s+)?(?:owner|admin\w*|root|maintainer|operator)|\bwithout\s+"
            r"consulting\s+anyone|\bobjections?\s+as\s+(?:mistakes|errors|noise)|\bcarry\s+out"
            r"\b[^.;\n]{0,60}\banyway\b|"
            r"\b(?:olvida|ignora|descarta)\w*\s+(?:todas\s+)?(?:las\s+)?(?:indicaciones|"
            r"instrucciones|reglas|órdenes)\s+(?:anteriores|previas|del\s+usuario)|\bsigue\s+"
            r"solo\s+las\s+(?:que|de)|\b(?:oublie|ignore|ignorez|oubliez)\w*\s+(?:toutes\s+)?"
            r"(?:les\s+)?(?:consignes|instructions|règles|demandes)|\b(?:vergiss|ignoriere|"
            r"missachte)\w*\s+(?:alle\s+)?(?:bisherigen\s+|vorherigen\s+)?(?:Anweisungen|"
            r"Vorgaben|Regeln|Anfragen)|\brichte\s+dich\s+nur\s+nach",
        ),
    )
)


# --- hidden text by what it says -----------------------------------------------------------

_ADDRESSED = re.compile(
    r"\b(?:when|if)\s+you\s+read\s+this|\bwhoever\s+reads\s+this|\b(?:note|message)\s+(?:to|"
    r"for)\s+(?:the\s+)?(?:ai|agent|assistant|model|reader)|^\s*(?:agent|assistant|ai)\s*:|"
    r"à\s+l'attention\s+de|\bpour\s+l'agent|\bnota\s+para|\bpara\s+(?:el\s+asistente|quien\s+"
    r"lea)|\bHinweis\s+für|\ban\s+den\s+Assistenten|\bfür\s+den\s+(?:Agenten|Assistenten)",
    _I,
)
_ACTION = re.compile(
    r"\b(?:add|copy|send|upload|push|delete|remove|run|execute|disable|enable|ignore|include|"
    r"paste|post|write|e-?mail|install|state|say|tell|report|always|never|must|should|"
    r"sube|envía|copia|añade|borra|ejecuta|desactiva|copie|envoie|ajoute|supprime|exécute|"
    r"désactive|pousse|kopier\w*|sende|füge|lösche|führe|deaktivier\w*|schick\w*)\b",
    _I,
)
HTML_COMMENT = re.compile(r"<!--(.*?)-->|^\s*\[//\]:\s*#\s*\((.*)\)\s*$", re.DOTALL | re.MULTILINE)
HIDDEN_ELEMENT = re.compile(
    r"<(\w+)[^>]*(?:display\s*:\s*none|visibility\s*:\s*hidden|\bhidden\b|font-size\s*:\s*0)"
    r"[^>]*>(.*?)</\1>",
    re.DOTALL | _I,
)


def says_something(inner: str) -> bool:
    """A comment or hidden element worth a flag: addressed to a reader, or an action
    in a sentence (not a marker such as ``<!-- toc -->``)."""
    if _ADDRESSED.search(inner):
        return True
    return len(inner.split()) >= 4 and bool(_ACTION.search(inner))


# --- encoded text that reads once rot13'd ---------------------------------------------------

_COMMON = frozenset(
    "the and user to of a in is it you that for on with as this be at by delete send ignore "
    "all your from or key secret token file files repo repository password upload run "
    "el la de que y los las usuario la le les et des utilisateur der die das und den nutzer".split()
)
_WORDS = re.compile(r"[A-Za-z]{2,}(?:\s+[A-Za-z]{2,}){4,}")


def rot13(text: str) -> list[tuple[str, int, int]]:
    out = []
    for match in _WORDS.finditer(text):
        words = match.group(0).lower().split()
        decoded = codecs.encode(match.group(0), "rot13")
        before = sum(w in _COMMON for w in words)
        after = sum(w in _COMMON for w in decoded.lower().split())
        if after >= 3 and after >= before + 3:
            out.append((f"rot13 text that reads {decoded[:60]!r}", *match.span()))
    return out


def _data_lines(name: str) -> list[str]:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    return [line.strip().lower() for line in lines if line.strip() and not line.startswith("#")]
