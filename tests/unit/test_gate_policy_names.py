"""A gate policy names breaks and windows only from their catalogues: an unknown
name is refused with the command that lists the known ones."""

from __future__ import annotations

import pytest

from harness import gate


@pytest.mark.parametrize(("field", "known", "message"), [
    ("break_only", "claim_fence", "unknown breaks ['no.such']; see `harness rules`"),
    ("windows", "claim.committed", "unknown windows ['no.such']; see `harness faults`"),
])
def test_unknown_names_are_refused_and_known_ones_kept(
    field: str, known: str, message: str
) -> None:
    with pytest.raises(ValueError) as info:  # pydantic ValidationError
        gate.Policy.model_validate({field: [known, "no.such"], "campaign": [{}]})
    assert message in str(info.value)
    policy = gate.Policy.model_validate({field: [known], "campaign": [{}]})
    assert getattr(policy, field) == [known]
