"""API keys: open tenants by default, fail closed with COMPASSMEM_API_AUTH_REQUIRED, keys that name their tenant.

``GET /v1/events/{id}`` over empty stores answers 404 once a request is let through, so 404 means "authorized".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from compassmem.core.api_keys import tenant_of_key
from compassmem.core.config import Settings
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.server import build_services
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from offline_api import LOCAL_URL, offline_app

ACME_KEY = "acme.AAAAAAAAAAAAAAAAAAAAAAAA"
GLOBEX_KEY = "globex.BBBBBBBBBBBBBBBBBBBBBBBB"
KEYS = [ACME_KEY, GLOBEX_KEY]
# A key of the object form, whose whole value is the secret.
SHARED = "one-key-for-two-tenants"


def _event(client: TestClient, tenant: str, key: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return client.get("/v1/events/e1", params={"tenant": tenant}, headers=headers)


@pytest.fixture(scope="module")
def closed() -> TestClient:
    return TestClient(offline_app(api_keys=KEYS, api_auth_required=True), base_url=LOCAL_URL)


@pytest.fixture(scope="module")
def open_by_default() -> TestClient:
    return TestClient(offline_app(api_keys=KEYS), base_url=LOCAL_URL)


def test_fail_closed_refuses_a_tenant_without_a_key(closed: TestClient) -> None:
    refused = _event(closed, "initech")
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert "COMPASSMEM_API_AUTH_REQUIRED" in refused.json()["detail"]
    assert _event(closed, "default").status_code == 401  # the default tenant is no exception
    # A key of another tenant opens nothing either, and the answer says whose key it is.
    wrong = _event(closed, "initech", ACME_KEY)
    assert wrong.status_code == 403 and wrong.json()["detail"] == "the API key is tenant 'acme''s, not tenant 'initech''s"


def test_a_key_opens_its_own_tenant_only(closed: TestClient) -> None:
    assert _event(closed, "acme", ACME_KEY).status_code == 404
    other = _event(closed, "globex", ACME_KEY)
    assert other.status_code == 403 and "'acme'" in other.json()["detail"]
    assert _event(closed, "globex").status_code == 401
    assert _event(closed, "globex", "globex.not-the-key-at-all-xx").status_code == 403


def test_every_tenant_endpoint_is_closed(closed: TestClient) -> None:
    turn = {"tenant": "initech", "conversation_id": "c", "turn_id": "1", "speaker": "A", "text": "hello",
            "timestamp": "2024-03-04T09:15:00+00:00"}
    assert closed.post("/v1/turns", json=turn).status_code == 401
    assert closed.post("/v1/query", json={"tenant": "initech", "conversation_id": "c",
                                          "question": "what?"}).status_code == 401
    assert closed.get("/v1/conversations/c/graph", params={"tenant": "initech"}).status_code == 401
    assert closed.delete("/v1/conversations/c", params={"tenant": "initech"}).status_code == 401
    assert closed.get("/healthz").status_code == 200  # operations endpoints name no tenant


def test_without_the_setting_tenants_without_a_key_stay_open(open_by_default: TestClient) -> None:
    assert _event(open_by_default, "initech").status_code == 404
    assert _event(open_by_default, "acme").status_code == 401
    assert _event(open_by_default, "acme", GLOBEX_KEY).status_code == 403
    assert _event(open_by_default, "acme", ACME_KEY).status_code == 404


def test_the_object_form_of_keys_still_works() -> None:
    client = TestClient(offline_app(api_keys={"acme": SHARED}, api_auth_required=True), base_url=LOCAL_URL)
    assert _event(client, "acme", SHARED).status_code == 404
    assert _event(client, "acme", "nope").status_code == 403
    assert _event(client, "initech").status_code == 401


def test_a_key_names_its_tenant() -> None:
    assert tenant_of_key(ACME_KEY) == "acme"
    assert tenant_of_key("s3cret") is None
    assert tenant_of_key("Not_A_Tenant.xxxxxxxxxxxxxxxxxxxx") is None
    assert tenant_of_key("acme.") is None


@pytest.mark.parametrize(("settings", "message"), [
    ({"api_auth_required": True}, "api_auth_required needs api_keys"),
    ({"api_keys": ["s3cret-without-tenant"]}, "must name its tenant"),
    ({"api_keys": ["acme.short"]}, "at least 16 characters"),
    ({"api_keys": [ACME_KEY, "acme.CCCCCCCCCCCCCCCCCCCCCCCC"]}, "a second key for tenant 'acme'"),
    # One key for two tenants would open both with either: acme's key would work for globex.
    ({"api_keys": {"acme": SHARED, "globex": SHARED}}, "tenants 'acme' and 'globex' have the same key"),
    ({"api_keys": {"acme": "k"}}, "tenant 'acme': the key has 1 characters of secret; at least 16"),
    ({"api_keys": {"globex": ACME_KEY}}, "tenant 'globex': the key names tenant 'acme'"),
    ({"api_keys": {"Not A Tenant": SHARED}}, "'Not A Tenant' is not a tenant id"),
    ({"api_admin_keys": ["x"]}, "COMPASSMEM_API_ADMIN_KEYS entry 0: the key has 1 characters; at least 16"),
    ({"api_admin_keys": [SHARED, SHARED]}, "COMPASSMEM_API_ADMIN_KEYS entries 0 and 1 are the same key"),
    ({"api_keys": {"acme": SHARED}, "api_admin_keys": [SHARED]}, "also tenant 'acme''s key"),
])
def test_bad_key_settings_stop_at_start(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(_env_file=None, **settings)  # type: ignore[call-arg]


def test_a_refused_key_setting_never_shows_the_key() -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(_env_file=None, api_keys={"acme": SHARED, "globex": SHARED})  # type: ignore[call-arg]
    assert all(SHARED not in item["msg"] for item in refused.value.errors())


def test_keys_come_as_a_json_list_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPASSMEM_API_KEYS", f'["{ACME_KEY}", "{GLOBEX_KEY}"]')
    monkeypatch.setenv("COMPASSMEM_API_AUTH_REQUIRED", "true")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.api_auth_required
    assert {tenant: key.get_secret_value() for tenant, key in settings.api_keys.items()} == {
        "acme": ACME_KEY, "globex": GLOBEX_KEY}


# -- every route against docs/security.md's "What each key reaches" ------------------------------------------------

SECURITY_PAGE = Path(__file__).resolve().parent.parent / "docs" / "security.md"
ADMIN_KEY = "operator-secret-of-the-walk"
# The table's credential columns, for a request about tenant acme; a key that is nobody's is refused like no key.
CREDENTIALS = {"no key": None, "another tenant's key": GLOBEX_KEY, "the tenant's key": ACME_KEY,
               "an admin key": ADMIN_KEY}
NOBODYS_KEY = "acme.ZZZZZZZZZZZZZZZZZZZZZZZZ"
PATH_VALUES = {"conversation_id": "c1", "event_id": "e1", "turn_id": "t1", "tenant": "acme", "key": "ranking.fitted"}
# A malformed value of each: an id that is blank, a tenant that breaks its pattern, a key over 100 characters.
BAD_PATH_VALUES = {"conversation_id": "%20", "event_id": "%20", "turn_id": "%20", "tenant": "NOT%20A%20TENANT",
                   "key": "k" * 101}
BODIES = {
    ("POST", "/v1/query"): {"tenant": "acme", "conversation_id": "c1", "question": "What happened?"},
    ("POST", "/v1/turns"): {"tenant": "acme", "conversation_id": "c1", "turn_id": "1", "speaker": "A",
                            "text": "hello", "timestamp": "2024-03-04T09:15:00+00:00"},
    ("PUT", "/v1/config/{key}"): {"value": False},
}
Route = tuple[str, str]


def key_table() -> dict[Route, dict[str, str]]:
    """The HTTP rows of the page's table: (method, path) -> credential column -> 'yes', '401' or '403'."""
    section = SECURITY_PAGE.read_text(encoding="utf-8").split("**What each key reaches.**", 1)[1]
    lines = section[section.index("\n|"):].strip().splitlines()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[:next(
        (n for n, line in enumerate(lines) if not line.startswith("|")), len(lines))]]
    header, body = rows[0], rows[2:]
    # The credential columns, then the tests that hold the row (docs/security.md names a test beside each promise).
    assert header[1:] == [*CREDENTIALS, "tested by"], header
    columns = len(CREDENTIALS) + 1
    table = {}
    for cells in body:
        assert len(cells) == len(header), cells
        for route in re.findall(r"`(GET|POST|PUT|DELETE) (/[^`]*)`", cells[0]):
            table[route] = {name: cell.split()[0] for name, cell in zip(header[1:columns], cells[1:columns],
                                                                        strict=True)}
    return table


@pytest.fixture(scope="module", params=[False, True], ids=["keys", "keys-required"])
def walked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, embedder: Any,
           embedded_falkordb: Any) -> Iterator[TestClient]:
    """The API over real (empty) stores, so that every request let through gets the endpoint's own answer."""
    settings = Settings(_env_file=None, api_keys=KEYS, api_admin_keys=[ADMIN_KEY],  # type: ignore[call-arg]
                        api_auth_required=request.param)
    stores = Stores(vectors=EdgeVectorStore(tmp_path_factory.mktemp("walk") / "qdrant", embedder.dim),
                    graph=FalkorDBGraphStore.from_embedded(embedded_falkordb))
    try:
        services = build_services(settings, stores, embedder, MemoryMetrics(process_collectors=False))
        with TestClient(create_app(services), base_url=LOCAL_URL) as client:
            client.required = request.param  # type: ignore[attr-defined]
            yield client
    finally:
        stores.close()


def _call(client: TestClient, route: Route, key: str | None, malformed: bool = False) -> int:
    method, path = route
    values = BAD_PATH_VALUES if malformed else PATH_VALUES
    url = re.sub(r"\{(\w+)\}", lambda match: values[match[1]], path)
    params = {"tenant": "Not A Tenant", "limit": "0"} if malformed else {"tenant": "acme"}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = BODIES.get(route)
    if body is not None:
        headers["Content-Type"] = "application/json"
    content = None if body is None else "{" if malformed else json.dumps(body)
    return client.request(method, url, params=params, headers=headers, content=content).status_code


def test_the_key_table_names_every_route_of_the_openapi_document(walked: TestClient) -> None:
    document = walked.get("/openapi.json").json()
    routes = {(method.upper(), path) for path, operations in document["paths"].items() for method in operations}
    assert routes - set(key_table()) == set(), "routes missing from docs/security.md's key table"
    with_body = {(method.upper(), path) for path, operations in document["paths"].items()
                 for method, operation in operations.items() if "requestBody" in operation}
    assert with_body == set(BODIES)


def test_every_route_answers_each_key_as_the_table_says(walked: TestClient) -> None:
    for route, expected in key_table().items():
        for name, key in CREDENTIALS.items():
            status = _call(walked, route, key)
            if expected[name] == "yes":
                assert status not in (401, 403, 500), (route, name, status)
            else:
                assert status == int(expected[name]), (route, name, status)


def test_a_refusal_comes_before_the_body_and_the_parameters_are_read(walked: TestClient) -> None:
    """Malformed parameters and bodies still get every refusal that needs no tenant read from the request: an
    admin route's, a key that is nobody's, and with keys required a request without a tenant's key."""
    for route, expected in key_table().items():
        if set(expected.values()) == {"yes"}:
            continue
        refusals: dict[str | None, int] = {NOBODYS_KEY: 403}
        if expected["the tenant's key"] != "yes":  # an admin route
            refusals.update({key: int(expected[name]) for name, key in CREDENTIALS.items() if expected[name] != "yes"})
        elif walked.required:  # type: ignore[attr-defined]
            refusals.update({None: 401, ADMIN_KEY: 403})
        for key, status in refusals.items():
            assert _call(walked, route, key, malformed=True) == status, (route, key)
