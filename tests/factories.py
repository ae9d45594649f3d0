"""Small builders for the rows a test needs."""

from django.contrib.auth import get_user_model


def make_user(username: str = "reviewer", *, staff: bool = False, password: str = "pw-for-tests-9"):
    user = get_user_model().objects.create_user(username=username, password=password)
    if staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return user
