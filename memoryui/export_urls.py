"""Routes of the write-back and export pages, included into ``memoryui.urls``'s
``memoryui_patterns`` (so their names are ``memoryui:layout_writeback`` and
``memoryui:workspace_export``)."""

from django.urls import path

from .views import exports

layout = "w/<str:name>/layouts/<int:layout_pk>/"

urlpatterns = [
    path(layout + "writeback/", exports.layout_writeback, name="layout_writeback"),
    path("w/<str:name>/export/", exports.workspace_export, name="workspace_export"),
]
