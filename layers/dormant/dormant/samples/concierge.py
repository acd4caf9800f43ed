"""The billing concierge: two agents working together (``dormant.samples.concierge:build``).

A ``concierge`` answers the customer and hands a billing question to a ``billing`` agent it
uses as a tool (``billing.as_tool``). Billing looks invoices up (``lookup_invoice``) and
refunds them (``refund``), and a person approves each refund before it is made (billing's
``tool_approval`` policy): the approval is the session's own, answered with the ordinary
``approvals`` input, and names the agent that asked (``concierge/billing``).

A customer who wants to talk to billing itself is handed over: the concierge calls
``transfer_to_billing`` (``handoffs=[billing]``), billing answers that turn and the next
ones itself, and hands back with ``transfer_to_concierge`` (``handoffs=["concierge"]``) when
the customer is done with it. Each hand-off is a ``handoff`` event in the ledger, and a REST
answer's ``agent`` says which agent answered.

An account audit is delegated: the concierge calls ``audit`` (``auditor.as_delegate``), a
deferred call that parks its turn; once that turn has committed, an ``auditor`` agent runs the
task in a child session of its own (in-process, or on the worker where the deployment hands
work on: ``dormant dev``'s worker thread, the webhook queue on AWS), going through the
invoices with ``list_invoices``. The auditor's final answer is the call's result: it resumes
the concierge, which passes it on. The child's head names its ``parent`` (session and call),
the parent's its ``children``, and ``GET /sessions/{id}`` and the console link the two.

``build(store=None, model=None)`` returns the app and the concierge. Both agents run on
``model`` when one is given, else on the model :func:`dormant.samples.bookings.default_model`
picks (Bedrock, OpenAI) and, with no key, on two small rule-based models (no network):
"refund invoice INV-7" makes the concierge ask billing, billing look the invoice up and ask
to refund it, and once approved, refund it and the concierge pass the answer on. A message
asking to talk (or speak) to billing, e.g. "let me talk to billing", hands over instead;
billing then answers the customer's invoice questions and refunds itself, and a message
naming the concierge or saying that's all ("thanks, that's all") hands back. "audit my
account" delegates the audit: the auditor lists the invoices and answers "No anomalies in 3
invoices.", and the concierge, resumed, says "The audit is done: No anomalies in 3
invoices."
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

import dormant
from dormant.models import Model, ModelRequest, ToolMessage, UserMessage
from dormant.models.rules import Reply, RuleModel, ToolOutcome
from dormant.samples.bookings import DemoModel, default_model
from dormant.schedulers import Scheduler
from dormant.stores import Store
from dormant.tools import ToolContext

__all__ = ["INVOICES", "AuditorDemo", "BillingDemo", "Concierge", "ConciergeDemo", "build"]

CONCIERGE = ("You are a customer concierge. Answer general questions yourself; hand a "
             "question about invoices, payments or refunds to the billing tool, in one clear "
             "sentence, and pass its answer on to the customer. When the customer asks to "
             "talk to billing themselves, hand the conversation over with "
             "transfer_to_billing instead. When they ask for an audit of their account, "
             "delegate it with the audit tool and pass the auditor's findings on.")
BILLING = ("You are the billing agent. Look invoices up with lookup_invoice before acting on "
           "them; refund an invoice with refund only when asked to (a person approves each "
           "refund). Answer in one sentence. When you talk to the customer yourself (the "
           "concierge handed the conversation over) and they are done with billing or ask "
           "for the concierge, hand back with transfer_to_concierge.")
AUDITOR = ("You are the auditor. List the customer's invoices with list_invoices and look "
           "for anomalies: an unknown status, an amount that is not positive, a refund "
           "larger than its invoice. Answer in one or two sentences: how many invoices you "
           "checked and what you found.")
HISTORY_TURNS = 20

#: The sample's invoices: reference -> (amount in cents, currency).
INVOICES: dict[str, tuple[int, str]] = {"INV-7": (12000, "EUR"), "INV-8": (4500, "EUR"),
                                        "INV-9": (99000, "EUR")}


class InvoiceRef(BaseModel):
    invoice: str = Field(description="The invoice reference, e.g. INV-7")


class Refund(BaseModel):
    invoice: str = Field(description="The invoice reference, e.g. INV-7")
    amount_cents: int = Field(ge=1, description="How much to refund, in cents")


def _lookup_invoice(ctx: ToolContext) -> dict[str, Any]:
    ref = ctx.args.invoice.upper()
    if ref not in INVOICES:
        raise ValueError(f"no invoice {ref}")
    cents, currency = INVOICES[ref]
    refunded = ref in ctx.state.get("refunded", [])
    return {"invoice": ref, "amount_cents": cents, "currency": currency,
            "status": "refunded" if refunded else "paid"}


def _list_invoices(ctx: ToolContext) -> list[dict[str, Any]]:
    return [{"invoice": ref, "amount_cents": cents, "currency": currency}
            for ref, (cents, currency) in INVOICES.items()]


def _refund(ctx: ToolContext) -> dict[str, Any]:
    # Runs only once a person approved this call (billing's tool_approval policy).
    ref = ctx.args.invoice.upper()
    ctx.state["refunded"] = [*ctx.state.get("refunded", []), ref]
    return {"invoice": ref, "amount_cents": ctx.args.amount_cents, "status": "refunded"}


class Concierge(NamedTuple):
    """The sample: ``app, concierge = build()`` (billing is the agent behind its ``billing``
    tool, the auditor the one behind its ``audit`` delegation)."""

    app: dormant.App
    concierge: dormant.Agent


def build(store: Store | None = None, model: Model | None = None, *,
          env: Mapping[str, str] | None = None,
          scheduler: Scheduler | None = None) -> Concierge:
    """The concierge app on ``store`` (memory when None), both agents served by ``model``
    (see the module doc for the default)."""
    app = dormant.App(name="concierge", store=store, scheduler=scheduler)
    chosen = model if model is not None else default_model(env)
    demo = isinstance(chosen, DemoModel)
    lookup_invoice = app.tool(name="lookup_invoice", description="Look an invoice up by its "
                              "reference", schema=InvoiceRef, execute=_lookup_invoice)
    refund = app.tool(name="refund", description="Refund an invoice (a person approves it "
                      "first)", schema=Refund, execute=_refund)
    billing = app.agent(
        name="billing", model=BillingDemo() if demo else chosen,
        # (its history is the conversation once it is handed over; as a tool it sees its task)
        context=[app.context.system(BILLING), app.context.history(limit=HISTORY_TURNS)],
        tools=[lookup_invoice, refund], tool_approval={"refund": "user-approval"},
        handoffs=["concierge"],
    )
    list_invoices = app.tool(name="list_invoices", description="List the customer's "
                             "invoices", execute=_list_invoices)
    auditor = app.agent(
        name="auditor", model=AuditorDemo() if demo else chosen,
        context=[app.context.system(AUDITOR), app.context.history(limit=HISTORY_TURNS)],
        tools=[list_invoices],
    )
    concierge = app.agent(
        name="concierge", model=ConciergeDemo() if demo else chosen,
        context=[app.context.system(CONCIERGE), app.context.history(limit=HISTORY_TURNS)],
        tools=[billing.as_tool(name="billing", description="Hand a question about invoices, "
                               "payments or refunds to the billing agent: say what the "
                               "customer wants, with the invoice reference"),
               auditor.as_delegate(name="audit", description="Delegate an audit of the "
                                   "customer's account to the auditor, who works on it in a "
                                   "session of its own: say what to audit")],
        handoffs=[billing],
    )
    return Concierge(app, concierge)


# --- the demo models ----------------------------------------------------------------------------

_INVOICE = re.compile(r"\bINV-?(\d+)\b", re.IGNORECASE)
_BILLING_WORDS = ("invoice", "refund", "bill", "payment", "charge")
_TO_BILLING = re.compile(r"\b(talk|speak)\b.*\bbilling\b", re.IGNORECASE)
_AUDIT = re.compile(r"\baudit", re.IGNORECASE)
_TO_CONCIERGE = re.compile(r"\bconcierge\b|\bthat(?:'|\u2019| i)s all\b", re.IGNORECASE)
_HELP = ("I'm the demo concierge (no OPENAI_API_KEY is set, so small rule-based models are "
         "answering). I hand billing questions to the billing agent: try \"what is invoice "
         "INV-8?\" or \"refund invoice INV-7\" (a person approves each refund), \"let me "
         "talk to billing\" to be handed over, or \"audit my account\" (the auditor works "
         "on it in a session of its own).")
_WELCOME_BACK = "Welcome back! Anything else I can help with?"
_BILLING_HERE = ("Billing here: which invoice can I help with? Say \"thanks, that's all\" to "
                 "go back to the concierge.")


def _invoice(text: str) -> str | None:
    match = _INVOICE.search(text)
    return f"INV-{match.group(1)}" if match else None


def _money(cents: Any, currency: Any) -> str:
    return f"{int(cents) / 100:.2f} {currency}" if isinstance(cents, int) else str(cents)


class ConciergeDemo(RuleModel):
    """The concierge's rules: asking to talk to billing hands the conversation over; asking
    for an audit delegates it (``audit``); another billing question goes to the ``billing``
    tool as it was asked; billing's and the auditor's answers are passed on; anything else
    gets the help text. Handed back to, it welcomes the customer back."""

    def reply(self, text: str) -> Reply:
        if _AUDIT.search(text):
            return self.call("audit", {"input": text})
        if _TO_BILLING.search(text):
            return self.call("transfer_to_billing",
                             {"reason": "the customer asked to talk to billing"})
        if any(word in text.lower() for word in _BILLING_WORDS):
            return self.call("billing", {"input": text})
        return _HELP

    def after_tool(self, result: ToolOutcome) -> Reply:
        if result.name == "transfer_to_concierge":  # (billing's call, in the conversation)
            return _WELCOME_BACK
        if result.name == "audit":  # (the auditor's final text, as a JSON string)
            found = result.data if isinstance(result.data, str) else result.content
            return (f"The audit didn't finish: {found}" if result.is_error
                    else f"The audit is done: {found}")
        if result.is_error:
            return f"Billing couldn't help: {result.content}"
        return f"Billing says: {result.data}"


class BillingDemo(RuleModel):
    """Billing's rules: a task naming an invoice looks it up; when the task asks for a
    refund and the invoice is paid, it refunds the whole amount (held for approval); then it
    says what came of it. Handed the conversation, it greets the customer and takes their
    messages as tasks, until one names the concierge or says that's all: then it hands
    back."""

    def answer(self, request: ModelRequest) -> Reply:
        # A looked-up invoice is refunded when the task (billing's user message) asked so.
        messages = request.messages
        task = next((m.text for m in reversed(messages) if isinstance(m, UserMessage)), "")
        last = messages[-1] if messages else None
        if (isinstance(last, ToolMessage) and last.name == "lookup_invoice"
                and not last.is_error and "refund" in task.lower()):
            data = ToolOutcome(last.name, last.call_id, last.content, False).data
            if isinstance(data, dict) and data.get("status") == "paid":
                return self.call("refund", {"invoice": data["invoice"],
                                            "amount_cents": data["amount_cents"]})
        return super().answer(request)

    def reply(self, text: str) -> Reply:
        ref = _invoice(text)
        if ref is None and _TO_CONCIERGE.search(text):
            return self.call("transfer_to_concierge",
                             {"reason": "the customer is done with billing"})
        if ref is None:
            return "Which invoice? Give its reference, e.g. INV-7."
        return self.call("lookup_invoice", {"invoice": ref})

    def after_tool(self, result: ToolOutcome) -> Reply:
        data = result.data
        if result.name == "transfer_to_billing":  # (the concierge's call, in the conversation)
            return _BILLING_HERE
        if result.name == "refund":
            return _refunded(result)
        if result.is_error or not isinstance(data, dict):
            return f"I couldn't look that invoice up: {result.content}"
        amount = _money(data.get("amount_cents"), data.get("currency"))
        return f"Invoice {data.get('invoice')} is for {amount}, {data.get('status')}."


class AuditorDemo(RuleModel):
    """The auditor's rules: any task lists the invoices, and the answer counts the ones
    checked and the anomalies found (an amount that is not positive)."""

    def reply(self, text: str) -> Reply:
        return self.call("list_invoices")

    def after_tool(self, result: ToolOutcome) -> Reply:
        invoices = result.data
        if result.is_error or not isinstance(invoices, list):
            return f"I couldn't list the invoices: {result.content}"
        odd = [i.get("invoice") for i in invoices
               if not isinstance(i.get("amount_cents"), int) or i["amount_cents"] <= 0]
        if odd:
            return f"Checked {len(invoices)} invoices: {', '.join(map(str, odd))} look wrong."
        return f"No anomalies in {len(invoices)} invoices."


def _refunded(result: ToolOutcome) -> str:
    asked = result.args if isinstance(result.args, dict) else {}
    ref = asked.get("invoice", "the invoice")
    if result.denied:
        why = (result.reason or "").strip().rstrip(".")
        return f"The refund of {ref} was not approved." + (f" The reason given: {why}."
                                                           if why else "")
    data = result.data
    if result.is_error or not isinstance(data, dict):
        return f"The refund of {ref} didn't work: {result.content}"
    currency = INVOICES.get(str(data.get("invoice")), (0, ""))[1]
    return f"Refunded {_money(data.get('amount_cents'), currency)} on invoice {ref}."
