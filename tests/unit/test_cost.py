"""What turns and sessions cost: the app's price table (``App(prices=...)``), scripted usage,
and the REST bodies that report tokens and cost."""

from __future__ import annotations

from typing import Any

import pytest

import dormant
from dormant.errors import ConfigError
from dormant.http import build_resolver
from dormant.models import RuleModel, ScriptedModel, ScriptError
from dormant.models._base import identify
from dormant.testing import model, run_test, user
from tests.unit.test_http_turn_control import _call, _event

#: Per million tokens.
PRICE = dormant.Price(input=2.0, output=8.0, cached=0.5)
#: What a reply reports using: 1200 in (1000 of them cached), 300 out (100 reasoning).
USED = {"input_tokens": 1200, "output_tokens": 300, "cached_tokens": 1000,
        "reasoning_tokens": 100}
#: What ``USED`` costs at ``PRICE``, by hand.
COST = (200 * 2.0 + 1000 * 0.5 + 300 * 8.0) / 1_000_000


def _served(prices: dict[str, Any] | None, *replies: Any) -> Any:
    app = dormant.App(name="costs", prices=prices)
    agent = app.agent(name="concierge", model=ScriptedModel(list(replies)))
    return build_resolver(app, agent, response={"usage": True})


def _turn(resolver: Any, session_id: str, message: str) -> dict[str, Any]:
    status, body = _call(resolver, _event("POST", "/turns", {"sessionId": session_id,
                                                            "message": message}))
    assert status == 200, body
    return body  # type: ignore[no-any-return]


# --- the price table ------------------------------------------------------------------------


@pytest.mark.parametrize("price", [{"input": -1, "output": 2}, {"input": 1}, "cheap",
                                   {"input": 1, "output": 2, "cache": 0.1}])
def test_a_price_that_does_not_fit_is_refused_naming_its_model(price: Any) -> None:
    with pytest.raises(ConfigError, match=r"prices\['gpt-5.6-luna'\]"):
        dormant.App(prices={"gpt-5.6-luna": price})


def test_a_price_is_given_as_a_price_or_its_fields() -> None:
    app = dormant.App(prices={"a": PRICE, "b": {"input": 1, "output": 4}})

    assert app.prices == {"a": PRICE, "b": dormant.Price(input=1, output=4)}
    assert "Price" in dormant.__all__


# --- a turn's usage on the wire -------------------------------------------------------------


def test_a_priced_turn_answers_its_tokens_and_cost() -> None:
    resolver = _served({"scripted": PRICE}, {"text": "Hello.", "usage": USED})

    body = _turn(resolver, "s1", "hi")

    assert body["usage"] == {"inputTokens": 1200, "outputTokens": 300, "cachedTokens": 1000,
                             "reasoningTokens": 100, "cost": pytest.approx(COST)}


def test_an_unpriced_model_costs_null() -> None:
    resolver = _served({"gpt-5.6-luna": PRICE}, {"text": "Hello.", "usage": USED})

    body = _turn(resolver, "s1", "hi")

    assert body["usage"]["inputTokens"] == 1200
    assert "cost" in body["usage"] and body["usage"]["cost"] is None


# --- a session's totals ---------------------------------------------------------------------


def test_a_session_view_and_its_detailed_line_sum_the_turns() -> None:
    resolver = _served({"scripted": PRICE}, {"text": "Hello.", "usage": USED},
                       {"text": "Bye.", "usage": {"input_tokens": 10, "output_tokens": 5}})
    _turn(resolver, "s1", "hi")
    _turn(resolver, "s1", "bye")
    totals = {"inputTokens": 1210, "outputTokens": 305, "cachedTokens": 1000,
              "reasoningTokens": 100, "turns": 2,
              "cost": pytest.approx(COST + (10 * 2.0 + 5 * 8.0) / 1_000_000)}

    status, view = _call(resolver, _event("GET", "/sessions/s1"))
    assert status == 200 and view["usage"] == totals
    status, listed = _call(resolver, _event("GET", "/sessions", query={"detail": "true"}))
    assert status == 200
    (line,) = listed["sessions"]
    assert line["usage"] == totals
    status, plain = _call(resolver, _event("GET", "/sessions"))
    assert status == 200 and "usage" not in plain["sessions"][0]


def test_a_session_with_no_turn_has_null_usage() -> None:
    app = dormant.App(name="costs")
    agent = app.agent(name="concierge", model=ScriptedModel([]))
    app.sessions.append("s1", "a note before any turn", owner="ann")
    resolver = build_resolver(app, agent)

    status, view = _call(resolver, _event("GET", "/sessions/s1"))

    assert status == 200 and view["usage"] is None


def test_unpriced_turns_sum_their_tokens_with_a_null_cost() -> None:
    resolver = _served(None, {"text": "Hello.", "usage": USED})
    _turn(resolver, "s1", "hi")

    status, view = _call(resolver, _event("GET", "/sessions/s1"))

    assert status == 200
    assert view["usage"] == {"inputTokens": 1200, "outputTokens": 300, "cachedTokens": 1000,
                             "reasoningTokens": 100, "cost": None, "turns": 1}


def test_the_openapi_description_says_what_usage_holds() -> None:
    status, spec = _call(_served(None), _event("GET", "/"))

    assert status == 200
    schemas = spec["components"]["schemas"]
    assert set(schemas["Usage"]["properties"]) == {"inputTokens", "outputTokens",
                                                   "cachedTokens", "reasoningTokens", "cost"}
    assert set(schemas["SessionUsage"]["properties"]) == {*schemas["Usage"]["properties"],
                                                          "turns"}
    for view in ("SessionView", "SessionLine"):
        usage = schemas[view]["properties"]["usage"]
        assert {"$ref": "#/components/schemas/SessionUsage"} in usage["anyOf"]
        assert usage["description"]


# --- scripted usage -------------------------------------------------------------------------


def test_the_test_kit_prices_a_scripted_reply() -> None:
    app = dormant.App(name="kit")
    agent = app.agent(name="concierge")

    run = run_test(agent, [user("hi"), model("Hello.", usage=USED)],
                   prices={"scripted": PRICE})

    assert (run.result.usage.input_tokens, run.result.usage.reasoning_tokens) == (1200, 100)
    assert run.result.usage.cost == pytest.approx(COST)
    assert run.session.head.usage == {**USED, "cost": pytest.approx(COST), "turns": 1}


@pytest.mark.parametrize("usage", [{"input_tokens": -1}, {"input_tokens": 1.5},
                                   {"tokens": 3}, {"cost": 0.1}, "lots"])
def test_a_scripted_usage_must_be_token_counts(usage: Any) -> None:
    with pytest.raises(ScriptError, match="usage must map"):
        ScriptedModel([{"text": "hi", "usage": usage}])


def test_the_models_with_no_network_name_themselves() -> None:
    assert identify(ScriptedModel()) == ("dormant", "scripted")
    assert identify(RuleModel()) == ("dormant", "rules")
