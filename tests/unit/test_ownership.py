"""Which operator release serves a DeltaIngestion: claim, renew, stand back, take over."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from deltaflow_operator.decisions.ownership import (
    Claim,
    Sighting,
    claim_record,
    decide_ownership,
    read_claim,
    renew_with_write,
)

ME, OTHER = "team-b/team-b-deltaflow-operator", "deltaflow-system/deltaflow-operator"
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
RENEW, EXPIRE = 300.0, 900.0
MINE_FRESH = Claim(ME, "2026-11-27T11:58:00Z")  # 120 s old
MINE_DUE = Claim(ME, "2026-11-27T11:55:00Z")  # 300 s old
THEIRS = Claim(OTHER, "2026-11-27T11:59:00Z")
THEIRS_RENEWED = Claim(OTHER, "2026-11-27T12:04:00Z")


@pytest.mark.parametrize(
    ("situation", "claim", "sighting", "monotonic", "action", "owner"),
    [
        ("nobody serves it yet: claim it", None, None, 1000.0, "claim", ME),
        ("my claim, renewed 2 min ago: serve", MINE_FRESH, None, 1000.0, "serve", ME),
        ("my claim, 5 min old: renew it", MINE_DUE, None, 1000.0, "renew", ME),
        ("my claim written by a clock ahead: serve", Claim(ME, "2026-11-27T13:00:00Z"), None,
         1000.0, "serve", ME),
        ("my claim with an unreadable time: renew", Claim(ME, "yesterday"), None, 1000.0,
         "renew", ME),
        ("another's claim, first seen: stand back", THEIRS, None, 1000.0, "stand_back", OTHER),
        ("another's claim unchanged for 899 s: stand back", THEIRS,
         Sighting(THEIRS, 101.0), 1000.0, "stand_back", OTHER),
        ("another's claim unchanged for 900 s: take over", THEIRS,
         Sighting(THEIRS, 100.0), 1000.0, "claim", ME),
        ("another's claim renewed since: the clock starts again", THEIRS_RENEWED,
         Sighting(THEIRS, 0.0), 1000.0, "stand_back", OTHER),
        ("a third operator claimed it meanwhile: stand back", Claim("x/y", "2026-11-27T11:00:00Z"),
         Sighting(THEIRS, 0.0), 1000.0, "stand_back", "x/y"),
    ],
)  # fmt: skip
def test_ownership_decisions(  # noqa: PLR0917 (one parameter per column of the table)
    situation: str,
    claim: Claim | None,
    sighting: Sighting | None,
    monotonic: float,
    action: str,
    owner: str,
) -> None:
    decision = decide_ownership(
        claim,
        me=ME,
        now=NOW,
        monotonic=monotonic,
        sighting=sighting,
        renew_after=RENEW,
        expire_after=EXPIRE,
    )
    assert (decision.action, decision.owner) == (action, owner), situation
    if action == "stand_back":
        assert claim is not None
        assert claim.operator in decision.message  # names the release it stands back for
        assert decision.sighting is not None
        assert decision.sighting.claim == claim


def test_a_stand_back_keeps_the_time_it_first_saw_the_claim_unchanged() -> None:
    first = decide_ownership(
        THEIRS, me=ME, now=NOW, monotonic=50.0, sighting=None, renew_after=RENEW,
        expire_after=EXPIRE,
    )  # fmt: skip
    later = decide_ownership(
        THEIRS, me=ME, now=NOW, monotonic=700.0, sighting=first.sighting, renew_after=RENEW,
        expire_after=EXPIRE,
    )  # fmt: skip
    assert later.sighting == Sighting(THEIRS, 50.0)
    taken = decide_ownership(
        THEIRS, me=ME, now=NOW, monotonic=950.0, sighting=later.sighting, renew_after=RENEW,
        expire_after=EXPIRE,
    )  # fmt: skip
    assert taken.action == "claim"
    assert "took over from operator deltaflow-system/deltaflow-operator" in taken.message


@pytest.mark.parametrize(
    ("status", "claim"),
    [
        (None, None),
        ({}, None),
        ({"operator": "a/b"}, None),
        ({"operator": {"name": ""}}, None),
        ({"operator": {"name": "a/b"}}, None),
        ({"operator": {"name": "a/b", "renewedAt": "2026-11-27T12:00:00Z"}},
         Claim("a/b", "2026-11-27T12:00:00Z")),
    ],
)  # fmt: skip
def test_read_claim_trusts_only_a_whole_claim(
    status: dict[str, object] | None, claim: Claim | None
) -> None:
    assert read_claim(status) == claim


@pytest.mark.parametrize(
    ("situation", "claim", "carried"),
    [
        ("nobody's claim: a status write claims nothing (the claim's own write does)", None, False),
        # Every write renews its own: an idle stream's stamp refresh every 240 s keeps a
        # 300 s claim from coming due however the two fell out of step.
        ("my claim, renewed a minute ago: carried", Claim(ME, "2026-11-27T11:59:00Z"), True),
        ("my claim, 5 min old: carried", MINE_DUE, True),
        ("my claim with an unreadable time: carried", Claim(ME, "yesterday"), True),
        ("another's claim, however old: never", Claim(OTHER, "2026-11-27T10:00:00Z"), False),
    ],
)
def test_every_status_write_renews_this_operators_own_claim(
    situation: str, claim: Claim | None, carried: bool
) -> None:
    assert renew_with_write(claim, ME) is carried, situation


def test_the_claim_a_write_carries_reads_back_as_this_operators_renewed_now() -> None:
    assert read_claim({"operator": claim_record(ME, NOW)}) == Claim(ME, "2026-11-27T12:00:00Z")
    due = decide_ownership(
        read_claim({"operator": claim_record(ME, NOW)}), me=ME, now=NOW, monotonic=0.0,
        sighting=None, renew_after=RENEW, expire_after=EXPIRE,
    )  # fmt: skip
    assert due.action == "serve"
