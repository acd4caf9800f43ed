"""The Lambda functions' fixtures (a moto deployment, a Lambda context, the IAM recorder),
shared with tests/functions so reliability tests drive the functions the same way."""

from tests.functions.conftest import context, deployed, iam_recorded  # noqa: F401
