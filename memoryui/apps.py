from django.apps import AppConfig


class MemoryuiConfig(AppConfig):
    name = "memoryui"
    verbose_name = "memoryui"
