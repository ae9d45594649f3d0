"""The site's URLconf (``ROOT_URLCONF``): the dashboard's routes (``memoryui.urls``), the
Django admin and the JSON API. The admin app is ``SimpleAdminConfig`` (see the
settings): its modules are discovered here, with the routes, not in every command."""

from django.contrib import admin
from django.urls import path

from . import api, urls

admin.autodiscover()

urlpatterns = [
    *urls.urlpatterns,
    path("admin/", admin.site.urls),
    path("api/", api.urls()),
]
