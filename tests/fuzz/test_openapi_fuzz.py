"""Schemathesis over every operation of /openapi.json, against the real app.

Each operation gets generated requests, valid and invalid (positive and negative
modes), sent with the user token, the admin token, a bad token or none, and with
path parameters that sometimes name things that exist (a link, a job, a reminder,
a task), and positive bodies that sometimes carry well-formed emails, URLs and
crons. Every answer must be documented: no 5xx, a status code the operation
lists, its content type, a body matching its schema, its documented headers;
invalid input gets a 4xx, a secured route refuses a request without its token,
an undocumented method gets 405.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from sluice.app.assembly import default_apps
from sluice.http.openapi import build_document
from tests.fuzz.helpers import ADMIN_TOKEN, Seed

pytestmark = pytest.mark.fuzz

# The document the app serves, built without I/O so pytest can collect one test per
# operation; test_served_document_is_the_fuzzed_one checks the app serves this very one.
BASE = "http://127.0.0.1"
EXAMPLES = 100
schema = schemathesis.openapi.from_dict(build_document(BASE, default_apps()))
# No unknown query parameters or body fields as "invalid" input: the API ignores unknown query
# parameters, as most HTTP APIs do (docs/reference/http-api.md asks nothing else), and the bodies
# that refuse unknown fields (400) are covered by tests/api.
schema.config.generation.update(
    max_examples=EXAMPLES, deterministic=True, database="none", allow_extra_parameters=False
)
# Schema examples cannot go with @schema.given(). No values learnt from the answers (ids,
# error messages): the same requests in every run, so CI sees what a developer saw.
schema.config.phases.examples.enabled = False
schema.config.phases.fuzzing.extra_data_sources.responses = False
schema.config.phases.fuzzing.error_feedback.is_enabled = False

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
    unsupported_method,
]
AUTH = ("user", "admin", "bad", "none")
# Path parameters worth pointing at something that exists.
KNOWN = {"code": "codes", "job_id": "job_ids", "id": "reminder_ids", "name": "task_names"}


def _headers(case: schemathesis.Case, auth: str, seed: Seed) -> dict[str, str]:
    if auth == "user" and case.operation.label == "DELETE /v1/tokens/current":
        return {"Authorization": f"Bearer {seed.fresh_token()}"}  # the call revokes it
    token = {"user": seed.user_token, "admin": ADMIN_TOKEN, "bad": "not-a-token"}.get(auth)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _auth_for(case: schemathesis.Case, data: st.DataObject) -> str:
    """Mostly the token the operation asks for; now and then another, or none."""
    security = case.operation.definition.raw.get("security") or []
    wanted = next((name for requirement in security for name in requirement), "none")
    return data.draw(st.sampled_from((wanted, wanted, wanted, *AUTH)), label="auth")


# Body fields the server checks beyond their JSON type: random strings almost never pass,
# so now and then well-formed values go in, and the fuzzer reaches 201, 409 and 429 too.
REALISTIC: dict[str, st.SearchStrategy[str]] = {
    "email": st.sampled_from(("fuzz@example.org", "Fuzz@Example.org", "other@example.org"))
    | st.from_regex(r"[a-z0-9]{1,10}@example\.org", fullmatch=True),
    "password": st.sampled_from(("fuzz-password-1", "wrong-password")),
    "url": st.from_regex(r"https://example\.(org|com)/[a-z0-9/]{0,20}", fullmatch=True),
    "alias": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{2,10}", fullmatch=True),
    "cron": st.sampled_from(("0 0 9 * * MON-FRI", "*/30 * * * * *", "0 0 0 31 2 *", "0 0 * * *")),
    "timezone": st.sampled_from(("Europe/Berlin", "UTC", "Mars/Olympus")),
    "text": st.sampled_from(("stand up", " ")),
}
REALISTIC_FIELDS = {
    "POST /v1/users": ("email", "password"),
    "POST /v1/tokens": ("email", "password"),
    "POST /v1/links": ("url", "alias"),
    "PATCH /v1/links/{code}": ("url",),
    "POST /v1/reminders": ("cron", "timezone", "text"),
}


def _positive(case: schemathesis.Case) -> bool:
    """Valid input by the document: only such cases get real values (an invalid one stays
    invalid, so `negative_data_rejection` judges what was really sent)."""
    return case.meta is not None and case.meta.generation.mode is GenerationMode.POSITIVE


def _realistic_body(case: schemathesis.Case, data: st.DataObject) -> None:
    fields = REALISTIC_FIELDS.get(case.operation.label, ())
    if not fields or not isinstance(case.body, dict) or not _positive(case):
        return
    if not data.draw(st.booleans(), label="realistic"):
        return
    for name in fields:
        if data.draw(st.booleans(), label=f"real {name}"):
            case.body[name] = data.draw(REALISTIC[name], label=name)


def _known_path_parameters(case: schemathesis.Case, data: st.DataObject, seed: Seed) -> None:
    if not _positive(case):
        return
    for name, attribute in KNOWN.items():
        values = getattr(seed, attribute)
        if not (case.path_parameters and name in case.path_parameters and values):
            continue
        if data.draw(st.booleans(), label=f"known {name}"):
            case.path_parameters[name] = data.draw(st.sampled_from(values), label=name)


@schema.parametrize()
@schema.given(data=st.data())
@settings(deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_every_answer_is_documented(
    case: schemathesis.Case, data: st.DataObject, served: Seed
) -> None:
    auth = _auth_for(case, data)
    _known_path_parameters(case, data, served)
    _realistic_body(case, data)
    case.call_and_validate(
        base_url=served.base_url, headers=_headers(case, auth, served), checks=CHECKS, timeout=30
    )


def test_served_document_is_the_fuzzed_one(served: Seed) -> None:
    answer = requests.get(f"{served.base_url}/openapi.json", timeout=30)
    assert answer.status_code == 200
    served_document: dict[str, Any] = answer.json()
    fuzzed = build_document(BASE, default_apps())
    assert served_document["paths"] == fuzzed["paths"]
    assert served_document["components"] == fuzzed["components"]
    assert len(list(schema.get_all_operations())) == sum(
        len(item) for item in served_document["paths"].values()
    )
