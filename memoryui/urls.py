from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import views

app_name = "memoryui"

memoryui_patterns = [
    path("", views.workspace_list, name="workspace_list"),
    path("w/<str:name>/", views.workspace_detail, name="workspace_detail"),
    path("w/<str:name>/reimport/", views.workspace_reimport, name="workspace_reimport"),
    path("w/<str:name>/imports/<int:pk>/", views.import_detail, name="import_detail"),
]

urlpatterns = [
    path("", include((memoryui_patterns, "memoryui"))),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]
