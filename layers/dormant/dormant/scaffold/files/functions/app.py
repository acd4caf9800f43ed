"""{{name}}: your agent. ``build`` is what ``dormant dev`` serves and the Lambda functions run.

One agent, two tools, and the two ways an agent waits for a person:

- ``refund`` runs only once a person approves it: the agent's ``tool_approval`` policy holds
  every call (the console shows Approve / Deny, with a reason). Approved, it runs, once;
  denied, it never runs and the model reads the denial and its reason.
- ``ask_customer`` asks the customer a question (which order, how much) and waits for their
  answer, which becomes the tool's result.

While it waits the session is only rows in the store. Change the tools, add tools, change the
prompt: ``tests/test_app.py`` shows how to test each path without a model.

With ``DORMANT_BEDROCK_MODEL`` set (a Bedrock model or inference profile id, with AWS
credentials in the environment) the agent runs on Amazon Bedrock; with ``OPENAI_API_KEY``, on
OpenAI (``DORMANT_OPENAI_MODEL`` picks the model); with neither, on ``LocalModel``: a few
rules, no network, so everything runs with no key. Extend its rules as you add tools. Deployed,
the template's ``BedrockModelId`` or ``OpenAISecretName`` parameter picks the model instead.
"""

from __future__ import annotations

import os
import re

import dormant
from dormant.models import Model, RuleModel
from dormant.models.rules import Reply, ToolOutcome
from dormant.stores import Store
from dormant.tools import ToolContext
from pydantic import BaseModel, Field

SYSTEM = ("You are a support assistant for an online shop. When a customer asks for a "
          "refund, call the refund tool with the order id and amount; a person approves or "
          "denies it. If you do not know the order or the amount, ask the customer with "
          "ask_customer first. Tell the customer what came of it.")


class Refund(BaseModel):
    order_id: str = Field(description="The order to refund, e.g. A-1042")
    amount: float = Field(gt=0, description="How much to refund, in the order's currency")


class Question(BaseModel):
    question: str = Field(description="What to ask the customer")


class Answer(BaseModel):
    answer: str = Field(description="The customer's answer")


def execute_refund(ctx: ToolContext) -> dict[str, object]:
    """Runs only once a person approved the call (a denied call never gets here)."""
    # Call your payment system here: this runs once per approved call, even if the turn is
    # retried (ctx.call_id is the idempotency key).
    return {"order_id": ctx.args.order_id, "amount": ctx.args.amount, "status": "refunded"}


_ORDER = re.compile(r"\b([A-Z]-?\d+)\b")
_AMOUNT = re.compile(r"(\d+(?:\.\d+)?)\s*(?:\$|€|£|eur|usd|gbp|dollars?|euros?|pounds?)",
                     re.IGNORECASE)
WHICH_ORDER = "Which order should I refund, and how much?"


class LocalModel(RuleModel):
    """The model when there is no key: rules instead of judgement, same tools, same ledger."""

    def reply(self, text: str) -> Reply:
        if "refund" not in text.lower():
            return "I can refund an order: say e.g. \"refund order A-1042\"."
        return _refund_or_ask(text)

    def after_tool(self, result: ToolOutcome) -> Reply:
        order = result.args.get("order_id") if isinstance(result.args, dict) else None
        if result.denied:
            why = f" ({result.reason})" if result.reason else ""
            return f"The refund for order {order} was declined{why}."
        data = result.data
        if result.is_error or not isinstance(data, dict):
            return f"That didn't work: {result.content}"
        if result.name == "ask_customer":
            return _refund_or_ask(str(data.get("answer", "")))
        return f"Refunded {data['amount']:.2f} for order {data['order_id']}."


def _refund_or_ask(text: str) -> Reply:
    """Refund the order ``text`` names (20 when it names no amount), or ask which order."""
    order = _ORDER.search(text)
    if order is None:
        return RuleModel.call("ask_customer", {"question": WHICH_ORDER})
    amount = _AMOUNT.search(text)
    return RuleModel.call("refund", {"order_id": order.group(1),
                                     "amount": float(amount.group(1)) if amount else 20.0})


def default_model() -> Model:
    """Bedrock when ``DORMANT_BEDROCK_MODEL`` is set, OpenAI when ``OPENAI_API_KEY`` is, else
    :class:`LocalModel`."""
    if os.environ.get("DORMANT_BEDROCK_MODEL"):
        from dormant.models import BedrockModel  # imported only when it serves

        return BedrockModel(os.environ["DORMANT_BEDROCK_MODEL"])
    if os.environ.get("OPENAI_API_KEY"):
        from dormant.models import OpenAIModel  # imported only when it serves

        return OpenAIModel(os.environ.get("DORMANT_OPENAI_MODEL") or "gpt-5.6-luna")
    return LocalModel()


def build(store: Store | None = None,
          model: Model | None = None) -> tuple[dormant.App, dormant.Agent]:
    """The app on ``store`` (in memory when None) and its agent, served by ``model``."""
    app = dormant.App(name="{{name}}", store=store)
    refund = app.tool(name="refund", description="Refund an order (a person approves it first)",
                      schema=Refund, execute=execute_refund)
    # No execute: the customer's answer, checked against Answer, is the tool's result.
    ask_customer = app.tool(name="ask_customer", description="Ask the customer a question and "
                            "wait for their answer", schema=Question, yield_schema=Answer)
    agent = app.agent(
        name="assistant",
        model=model if model is not None else default_model(),
        context=[app.context.system(SYSTEM), app.context.history(limit=20)],
        tools=[refund, ask_customer],
        # Every refund waits for a person's Approve / Deny; a function of the call's
        # arguments can decide instead, e.g. lambda args: "approved" if args.amount < 10
        # else "user-approval".
        tool_approval={"refund": "user-approval"},
    )
    return app, agent
