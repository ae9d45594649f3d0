from django.apps import AppConfig


class MemoryuiConfig(AppConfig):
    name = "memoryui"
    verbose_name = "memoryui"

    def ready(self) -> None:
        from . import webhooks  # noqa: F401  (its signal receivers and Celery task)
