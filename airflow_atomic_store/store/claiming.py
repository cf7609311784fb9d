"""A claim run through the claimable set that serves it: the claim verbs share it."""

from __future__ import annotations

from collections.abc import Collection

from airflow_atomic_store.store.backend import Backend, ClaimSetGone
from airflow_atomic_store.store.claim_sets import ClaimSetCatalog
from airflow_atomic_store.store.requests import Claimed, ClaimRequest, Selection


class Claims:
    """Runs claim requests (``atomic_claim``, ``retire``) on one store's backend."""

    def __init__(self, backend: Backend, claim_sets: ClaimSetCatalog) -> None:
        self._backend = backend
        self._claim_sets = claim_sets

    def run(self, request: ClaimRequest, written: Collection[str]) -> Claimed:
        """Claim through the set that serves the selection (declaring one if the store
        may; ``written``: the fields the claim changes); a set whose index another
        process dropped meanwhile is forgotten, and the claim runs again without it."""
        selection = request.selection
        chosen = self._claim_sets.for_claim(
            selection.table,
            selection.where,
            selection.match,
            selection.ordering.column,
            written=written,
            may_declare=True,
        )
        if chosen is None and selection.ordering.column == "record_timestamp":
            self._claim_sets.ensure_record_order()
        try:
            return self._backend.claim(request.of(selection.served_by(chosen)))
        except ClaimSetGone:
            self._claim_sets.forget(selection.table)
            return self._backend.claim(request)

    @property
    def skips_held_rows(self) -> bool:
        """Whether a short batch may have stepped past rows others hold (``Backend``)."""
        return self._backend.skips_held_rows

    def count(self, selection: Selection) -> int:
        """How many rows match ``selection`` (at most its limit), locked ones included,
        through the set a claim of it would use: what a short batch of claims left."""
        chosen = self._claim_sets.for_claim(
            selection.table,
            selection.where,
            selection.match,
            selection.ordering.column,
            may_declare=False,
        )
        try:
            return self._backend.count(selection.served_by(chosen)).count
        except ClaimSetGone:
            self._claim_sets.forget(selection.table)
            return self._backend.count(selection).count
