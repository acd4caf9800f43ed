"""The Bookings app as the Lambda functions serve it, built once per cold start.

Shared by ``api/app.py`` and ``webhook/app.py`` (Lambda puts this directory, the functions'
``CodeUri``, on ``sys.path``). Everything comes from the environment the template sets: the
table and bucket (``DynamoDBStore.from_env``), and the model (``OpenAIModel.from_settings``,
whose key is read from Secrets Manager/SSM on the first model call, not here). With no secret
or parameter configured (``sam local``, tests) the sample's own default applies: OpenAI when
``OPENAI_API_KEY`` is set, else its demo model.
"""

from __future__ import annotations

from collections.abc import Mapping

from bookings import Bookings, build

from dormant.settings import Settings
from dormant.stores import DynamoDBStore

__all__ = ["deployed_bookings"]


def deployed_bookings(env: Mapping[str, str] | None = None) -> tuple[Bookings, Settings]:
    """The Bookings app on the deployment's DynamoDB table, and the settings it was built from."""
    settings = Settings.from_env(env)
    store = DynamoDBStore.from_env(env)
    if settings.openai_secret or settings.openai_parameter:
        from dormant.models import OpenAIModel

        return build(store=store, model=OpenAIModel.from_settings(settings), env=env), settings
    return build(store=store, env=env), settings
