"""{{name}}: your agent. ``build`` is what ``dormant dev`` serves and the Lambda functions run.

One agent with one tool. ``refund`` waits for a person: the model calls it, the turn pauses
(the session is only rows in the store meanwhile), and a person answers it with a
``Decision``; the refund runs only then, once. Change the tool, add tools, change the prompt:
``tests/test_app.py`` shows how to test each path without a model.

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
          "declines it. Tell the customer what came of it.")


class Refund(BaseModel):
    order_id: str = Field(description="The order to refund, e.g. A-1042")
    amount: float = Field(gt=0, description="How much to refund, in the order's currency")


class Decision(BaseModel):
    approved: bool = Field(description="Whether the refund may go ahead")
    note: str | None = Field(default=None, description="Why, for the customer")


def execute_refund(ctx: ToolContext) -> dict[str, object]:
    """Runs once a person has answered (``ctx.input`` is their ``Decision``)."""
    if not ctx.input or not ctx.input.approved:
        return {"order_id": ctx.args.order_id, "status": "declined",
                "note": ctx.input.note if ctx.input else None}
    # Call your payment system here: this runs once per decision, even if the turn is retried.
    return {"order_id": ctx.args.order_id, "amount": ctx.args.amount, "status": "refunded"}


_ORDER = re.compile(r"\b([A-Z]-?\d+)\b")
_AMOUNT = re.compile(r"(\d+(?:\.\d+)?)\s*(?:\$|€|£|eur|usd|gbp|dollars?|euros?|pounds?)",
                     re.IGNORECASE)


class LocalModel(RuleModel):
    """The model when there is no key: rules instead of judgement, same tools, same ledger."""

    def reply(self, text: str) -> Reply:
        order = _ORDER.search(text)
        if "refund" in text.lower() and order:
            amount = _AMOUNT.search(text)
            return self.call("refund", {"order_id": order.group(1),
                                        "amount": float(amount.group(1)) if amount else 20.0})
        return "I can refund an order: say e.g. \"refund order A-1042\"."

    def after_tool(self, result: ToolOutcome) -> Reply:
        data = result.data
        if result.is_error or not isinstance(data, dict):
            return f"That didn't work: {result.content}"
        if data.get("status") == "refunded":
            return f"Refunded {data['amount']:.2f} for order {data['order_id']}."
        note = f" ({data['note']})" if data.get("note") else ""
        return f"The refund for order {data['order_id']} was declined{note}."


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
    refund = app.tool(name="refund", description="Refund an order once a person approves it",
                      schema=Refund, yield_schema=Decision, execute=execute_refund)
    agent = app.agent(
        name="assistant",
        model=model if model is not None else default_model(),
        context=[app.context.system(SYSTEM), app.context.history(limit=20)],
        tools=[refund],
    )
    return app, agent
