"""Bank routes through upstream's own client (``hindsight-client==1.1.0``) against a real ``serve``:
create and update (PUT, PATCH), profile, background, list, delete, stats, the time series, the
routes answered 501, and bank settings refused when out of range."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hindsight_recall.testing.service import ServerThread

hindsight_client = pytest.importorskip("hindsight_client")
import httpx  # noqa: E402
from hindsight_client.hindsight_client import _run_async  # noqa: E402
from hindsight_client_api.exceptions import ApiException  # noqa: E402
from hindsight_client_api.models import (  # noqa: E402
    AddBackgroundRequest,
    CreateBankRequest,
    DispositionTraits,
    UpdateDispositionRequest,
)
from hindsight_recall.service.wire import EXTRAS  # noqa: E402

B = "/v1/default/banks"


@pytest.fixture(scope="module")
def service_url(serve: Callable[..., ServerThread]) -> str:
    return serve(own_database=True).url


@pytest.fixture
def client(service_url: str) -> Iterator[Any]:
    with hindsight_client.Hindsight(base_url=service_url, timeout=120) as c:
        yield c


@pytest.fixture
def http(service_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(headers=EXTRAS, base_url=service_url, timeout=120) as c:
        yield c


def new_bank() -> str:
    return f"bk-{uuid.uuid4().hex[:10]}"


def error_of(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["message"] == body["detail"]
    return str(body["message"])


# --- create, update, profile -------------------------------------------------------------------

def test_create_bank_with_name_and_mission_then_profile(client: Any) -> None:
    bank_id = new_bank()
    created = client.create_bank(bank_id, name="Support desk", mission="Remember customer tickets.",
                                 disposition_empathy=5)
    assert (created.name, created.mission, created.background) == ("Support desk", "Remember customer tickets.",
                                                                     "Remember customer tickets.")
    profile = _run_async(client.banks.get_bank_profile(bank_id))
    assert profile.name == "Support desk" and profile.mission == "Remember customer tickets."
    assert (profile.disposition.empathy, profile.disposition.skepticism) == (5, 3)


def test_set_mission_is_stored(client: Any) -> None:
    bank_id = new_bank()
    response = client.set_mission(bank_id, "Track sprint progress")
    assert response.bank_id == bank_id and response.mission == "Track sprint progress"
    assert _run_async(client.banks.get_bank_profile(bank_id)).mission == "Track sprint progress"
    client.set_reflect_mission(bank_id, "Track capacity too")
    assert _run_async(client.banks.get_bank_profile(bank_id)).mission == "Track capacity too"


async def test_update_bank_changes_only_the_given_fields(service_url: str) -> None:
    client = hindsight_client.Hindsight(base_url=service_url, timeout=120)
    try:
        bank_id = new_bank()
        await client.acreate_bank(bank_id, name="First", mission="M1")
        updated = await client.banks.update_bank(bank_id, CreateBankRequest(name="Second"))
        assert (updated.name, updated.mission) == ("Second", "M1")
        updated = await client.banks.update_bank(bank_id, CreateBankRequest(background="M2", disposition_skepticism=1))
        assert (updated.name, updated.mission, updated.disposition.skepticism) == ("Second", "M2", 1)
        put = await client.banks.create_or_update_bank(bank_id, CreateBankRequest(reflect_mission="M3"))
        assert (put.name, put.mission) == ("Second", "M3")
    finally:
        await client.aclose()


def test_patch_of_a_missing_bank_is_404_and_creates_nothing(client: Any, http: httpx.Client) -> None:
    bank_id = new_bank()
    with pytest.raises(ApiException) as caught:
        _run_async(client.banks.update_bank(bank_id, CreateBankRequest(name="ghost")))
    assert caught.value.status == 404
    assert http.get(f"{B}/{bank_id}").status_code == 404
    assert bank_id not in [b["bank_id"] for b in http.get(B, params={"q": bank_id}).json()["banks"]]


def test_put_profile_sets_the_disposition(client: Any) -> None:
    bank_id = new_bank()
    traits = DispositionTraits(skepticism=5, literalism=1, empathy=2)
    profile = _run_async(client.banks.update_bank_disposition(bank_id, UpdateDispositionRequest(disposition=traits)))
    assert (profile.disposition.skepticism, profile.disposition.literalism, profile.disposition.empathy) == (5, 1, 2)
    assert _run_async(client.banks.get_bank_profile(bank_id)).disposition.literalism == 1


@pytest.mark.parametrize("traits", [{"skepticism": 0, "literalism": 3, "empathy": 3},
                                    {"skepticism": 3, "literalism": 6, "empathy": 3}])
def test_put_profile_refuses_traits_out_of_range(http: httpx.Client, traits: dict[str, int]) -> None:
    response = http.put(f"{B}/{new_bank()}/profile", json={"disposition": traits})
    assert response.status_code == 422 and "disposition" in response.json()["message"]


def test_background_appends_to_the_mission(client: Any) -> None:
    bank_id = new_bank()
    first = _run_async(client.banks.add_bank_background(bank_id, AddBackgroundRequest(content="Born in Texas.")))
    assert first.mission == "Born in Texas." and first.background == "Born in Texas."
    second = _run_async(client.banks.add_bank_background(bank_id, AddBackgroundRequest(content="Likes tea.")))
    assert second.mission == "Born in Texas.\n\nLikes tea."
    assert _run_async(client.banks.get_bank_profile(bank_id)).mission == "Born in Texas.\n\nLikes tea."


def test_background_needs_content(http: httpx.Client) -> None:
    response = http.post(f"{B}/{new_bank()}/background", json={})
    assert response.status_code == 422 and "content" in response.json()["message"]


def test_profile_of_an_unknown_bank_is_404(client: Any) -> None:
    with pytest.raises(ApiException) as caught:
        _run_async(client.banks.get_bank_profile(new_bank()))
    assert caught.value.status == 404


def test_profile_text_with_a_nul_byte_is_refused(http: httpx.Client) -> None:
    response = http.put(f"{B}/{new_bank()}", json={"name": "a\u0000b"})
    assert response.status_code == 422 and "name" in response.json()["message"]


# --- list ---------------------------------------------------------------------------------------

def test_list_banks_has_upstreams_fields_and_newest_write_first(client: Any) -> None:
    tag = uuid.uuid4().hex[:6]
    older, newer, empty = f"lst-{tag}-a", f"lst-{tag}-b", f"lst-{tag}-c"
    client.create_bank(empty, name=f"Empty {tag}")
    client.retain(older, "Ann plays chess.", document_id="d1")
    client.retain(newer, "Ben plays go.")
    client.retain(newer, "Ben plays shogi.")
    listed = _run_async(client.banks.list_banks(q=f"lst-{tag}"))
    assert listed.total == 3 and [b.bank_id for b in listed.banks] == [newer, older, empty]
    by_id = {b.bank_id: b for b in listed.banks}
    assert (by_id[newer].fact_count, by_id[older].fact_count, by_id[empty].fact_count) == (2, 1, 0)
    assert by_id[older].last_document_at is not None and by_id[older].last_write_at is not None
    assert by_id[empty].last_write_at is None and by_id[empty].name == f"Empty {tag}"
    assert by_id[newer].last_write_at >= by_id[older].last_write_at
    assert by_id[newer].disposition.skepticism == 3 and by_id[newer].created_at


def test_list_banks_searches_names_and_pages(client: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    for i in range(3):
        client.create_bank(f"pg-{tag}-{i}", name=f"Team {tag.upper()}")
    assert _run_async(client.banks.list_banks(q=f"team {tag}")).total == 3  # case-insensitive, by name
    page = _run_async(client.banks.list_banks(q=tag, limit=2, offset=1))
    assert (page.total, len(page.banks), page.limit, page.offset) == (3, 2, 2, 1)
    beyond = _run_async(client.banks.list_banks(q=tag, limit=2, offset=10))
    assert beyond.total == 3 and beyond.banks == []


@pytest.mark.parametrize(("params", "field"), [
    ({"limit": str(10**30)}, "limit"), ({"offset": str(2**63)}, "offset"), ({"offset": "-1"}, "offset"),
    ({"limit": "\u00b2"}, "limit"), ({"q": "a\u0000"}, "q"),
])
def test_list_banks_bad_query_is_400_naming_it(http: httpx.Client, params: dict[str, str], field: str) -> None:
    assert error_of(http.get(B, params=params), 400).startswith(f"{field}:")


# --- delete -------------------------------------------------------------------------------------

def test_delete_bank_then_its_memories_list_empty(client: Any) -> None:
    bank_id = new_bank()
    client.create_bank(bank_id, mission="This bank will be deleted")
    client.retain(bank_id, "Some memory to store")
    response = _run_async(client.banks.delete_bank(bank_id))
    assert response.success is True and response.deleted_count >= 1
    assert client.list_memories(bank_id).total == 0


async def test_adelete_bank(service_url: str) -> None:
    client = hindsight_client.Hindsight(base_url=service_url, timeout=120)
    try:
        bank_id = new_bank()
        await client.acreate_bank(bank_id, mission="deleted via async")
        await client.aretain(bank_id, "Async memory")
        assert (await client.adelete_bank(bank_id)).success is True
        assert (await client.alist_memories(bank_id)).total == 0
    finally:
        await client.aclose()


def test_delete_of_an_unknown_bank_deletes_nothing(client: Any) -> None:
    response = client.delete_bank(new_bank())
    assert response.success is True and response.deleted_count == 0


# --- stats and the time series ------------------------------------------------------------------

def test_stats_count_memories_links_and_documents(client: Any) -> None:
    bank_id = new_bank()
    client.retain_batch(bank_id, [{"content": "Cleo sails on Lake Geneva.", "timestamp": "2024-01-01T00:00:00Z"},
                                  {"content": "Cleo sails on Lake Constance.", "timestamp": "2024-01-02T00:00:00Z"}],
                        document_id="sail")
    stats = _run_async(client.banks.get_agent_stats(bank_id))
    assert stats.bank_id == bank_id and stats.total_nodes == 2 and stats.total_documents == 1
    assert stats.nodes_by_fact_type == {"world": 2, "experience": 0, "observation": 0}
    assert sum(stats.links_by_link_type.values()) == stats.total_links > 0
    assert stats.links_by_link_type.get("semantic", 0) > 0  # near-identical texts
    assert stats.last_memory_write_at is not None and stats.pending_operations == 0


def test_stats_of_an_unknown_bank_is_404(client: Any) -> None:
    with pytest.raises(ApiException) as caught:
        _run_async(client.banks.get_agent_stats(new_bank()))
    assert caught.value.status == 404


@pytest.mark.parametrize(("period", "trunc", "count"), [
    ("1h", "minute", 60), ("12h", "hour", 12), ("1d", "hour", 24), ("7d", "day", 7), ("30d", "day", 30),
    ("90d", "day", 90), ("nonsense", "day", 7),
])
def test_timeseries_buckets(client: Any, period: str, trunc: str, count: int) -> None:
    bank_id = new_bank()
    client.retain_batch(bank_id, [{"content": "Dora bakes bread."}, {"content": "Dora bakes rolls."}])
    series = _run_async(client.banks.get_memories_timeseries(bank_id, period=period))
    assert (series.period, series.trunc, series.time_field, len(series.buckets)) == (
        "7d" if period == "nonsense" else period, trunc, "created_at", count)
    assert sum(b.world for b in series.buckets) == 2 and series.buckets[-1].world == 2
    assert all(b.experience == 0 and b.observation == 0 for b in series.buckets)
    times = [b.time for b in series.buckets]
    assert times == sorted(times) and times[-1].endswith("+00:00")


def test_timeseries_by_event_time(client: Any) -> None:
    bank_id = new_bank()
    client.retain(bank_id, "Eli moved to Oslo.", timestamp="2001-01-01T00:00:00Z")
    by_event = _run_async(client.banks.get_memories_timeseries(bank_id, period="7d", time_field="mentioned_at"))
    assert by_event.time_field == "mentioned_at" and sum(b.world for b in by_event.buckets) == 0  # 2001: outside
    fallback = _run_async(client.banks.get_memories_timeseries(bank_id, time_field="bogus"))
    assert fallback.time_field == "created_at" and sum(b.world for b in fallback.buckets) == 1


def test_timeseries_of_an_unknown_bank_is_404(client: Any) -> None:
    with pytest.raises(ApiException) as caught:
        _run_async(client.banks.get_memories_timeseries(new_bank()))
    assert caught.value.status == 404


# --- routes answered 501 ------------------------------------------------------------------------

def test_every_unserved_route_answers_501_naming_it(http: httpx.Client) -> None:
    from hindsight_recall.service.unserved import UNSERVED

    bank_id = new_bank()
    http.put(f"{B}/{bank_id}", json={})
    for path, methods, reason in UNSERVED:
        concrete = path.replace("{bank_id}", bank_id)
        concrete = concrete.replace("{", "x-").replace("}", "")
        for method in methods:
            response = http.request(method, concrete, json={})
            assert response.status_code == 501, f"{method} {concrete}: {response.status_code}"
            body = response.json()
            assert body["code"] == "not_implemented" and body["message"] == body["detail"]
            assert f"{method} {path}" in body["message"] and reason in body["message"]


def test_mental_models_directives_and_the_knowledge_base_through_the_client(client: Any) -> None:
    """Reading them answers what is stored (nothing yet); writing a mental model is a model's work (501)."""
    bank_id = new_bank()
    client.create_bank(bank_id)
    assert client.list_mental_models(bank_id).items == []
    assert client.list_directives(bank_id).items == []
    assert client.get_knowledge_base_tree(bank_id).roots == []
    created = client.create_directive(bank_id, name="Brief", content="Answer in one sentence.")
    assert [d.name for d in client.list_directives(bank_id).items] == ["Brief"] and created.is_active
    with pytest.raises(ApiException) as caught:
        client.create_mental_model(bank_id, name="Alice", source_query="Who is Alice?")
    assert caught.value.status == 501 and "written by a model" in str(caught.value.body)


# --- bank settings are range-checked ------------------------------------------------------------

@pytest.mark.parametrize(("key", "value"), [
    ("recall_budget_fixed_high", 1e11), ("recall_budget_fixed_low", 10_001), ("recall_budget_fixed_mid", 0),
    ("recall_budget_max", 10**9), ("recall_budget_min", 0), ("recall_budget_adaptive_mid", 1e9),
    ("recall_budget_adaptive_low", 0), ("recall_rrf_k", 10**7), ("recall_context_expand", 10**6),
    ("recall_context_neighbour_weight", 1e6), ("recall_context_document_weight", -1),
    ("recall_score_weights", "keyword:1e308"), ("recall_rrf_weights", "keyword:-1"),
    ("recall_rrf_weights", "keyword:x"), ("recall_score_weights", "keyword:1\u0000"),
    ("recall_rrf_weights", "k" * 1001), ("recall_budget_function", "no such\u0000"),
    ("recall_fusion", "median"),
])
def test_out_of_range_settings_are_refused_naming_them(http: httpx.Client, key: str, value: Any) -> None:
    bank_id = new_bank()
    http.put(f"{B}/{bank_id}", json={})
    response = http.patch(f"{B}/{bank_id}/config", json={"updates": {key: value}})
    assert 400 <= response.status_code < 500 and response.json()["message"].startswith(key)
    assert http.get(f"{B}/{bank_id}/config").json()["overrides"] == {}


def test_out_of_range_budget_is_refused_through_the_client(client: Any) -> None:
    import aiohttp

    bank_id = new_bank()
    client.create_bank(bank_id)
    with pytest.raises(aiohttp.ClientResponseError) as caught:
        client.update_bank_config(bank_id, recall_budget_fixed_high=10**11)
    assert caught.value.status == 422
    assert client.update_bank_config(bank_id, recall_budget_fixed_high=10_000)["overrides"] == {
        "recall_budget_fixed_high": 10_000}


def test_nan_and_infinity_are_refused(http: httpx.Client) -> None:
    bank_id = new_bank()
    http.put(f"{B}/{bank_id}", json={})
    for raw in ("NaN", "Infinity"):
        body = '{"updates": {"recall_context_document_weight": ' + raw + '}}'
        response = http.patch(f"{B}/{bank_id}/config", content=body, headers={"content-type": "application/json"})
        assert 400 <= response.status_code < 500


def test_the_largest_accepted_settings_still_recall(client: Any, http: httpx.Client) -> None:
    from hindsight_recall.settings import MAX_RECALL_BUDGET, MAX_RECALL_WEIGHT

    bank_id = new_bank()
    client.retain_batch(bank_id, [{"content": "Fay repairs clocks in Prague."},
                                  {"content": "Fay collects old maps."}], document_id="fay")
    top = {"recall_budget_fixed_low": MAX_RECALL_BUDGET, "recall_budget_fixed_mid": MAX_RECALL_BUDGET,
           "recall_budget_fixed_high": MAX_RECALL_BUDGET, "recall_budget_max": MAX_RECALL_BUDGET,
           "recall_budget_min": MAX_RECALL_BUDGET, "recall_rrf_k": MAX_RECALL_BUDGET,
           "recall_context_expand": MAX_RECALL_BUDGET, "recall_context_neighbour_weight": MAX_RECALL_WEIGHT,
           "recall_context_document_weight": MAX_RECALL_WEIGHT, "recall_budget_adaptive_low": MAX_RECALL_WEIGHT,
           "recall_budget_adaptive_mid": MAX_RECALL_WEIGHT, "recall_budget_adaptive_high": MAX_RECALL_WEIGHT,
           "recall_score_weights": f"keyword:{MAX_RECALL_WEIGHT:g},semantic:{MAX_RECALL_WEIGHT:g}",
           "recall_rrf_weights": f"keyword:{MAX_RECALL_WEIGHT:g}"}
    assert http.patch(f"{B}/{bank_id}/config", json={"updates": top}).status_code == 200
    for function in ("fixed", "adaptive"):
        for fusion in ("score", "rrf"):
            updates = {"recall_fusion": fusion, "recall_budget_function": function}
            assert http.patch(f"{B}/{bank_id}/config", json={"updates": updates}).status_code == 200
            for budget in ("low", "mid", "high"):
                found = client.recall(bank_id, "Who repairs clocks?", budget=budget, max_tokens=100_000)
                # extreme weights may reorder the two; the recall must answer, and find the fact
                assert "Fay repairs clocks in Prague." in [r.text for r in found.results]
