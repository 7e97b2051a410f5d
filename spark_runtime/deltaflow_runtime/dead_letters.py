"""The dead-letter ledger: whose refused records are committed, waiting or in flight, and under
which ``txnVersion`` a dead-letter commit may go.

One invariant, kept here and nowhere else: the dead-letter table's ``txnVersion`` V for a stream
says that every batch up to V has its dead letters in that table. Start-up trusts it (batches up
to V are not read again) and Delta trusts it (a second commit under V is skipped as already
done). Two ways to break it, both closed here:

- A commit under V while batch V's own dead letters are still on their way (read again from
  Kafka after the table commit): Delta then skips batch V's own commit as a duplicate, and its
  dead letters are lost. A batch in that state is *settling*; a commit of waiting dead letters
  goes under the batch before it.
- A commit that landed but reported failure (a lost response, a missing observation), retried
  under a later version: the same rows twice. An attempt whose outcome is unknown stays *in
  doubt* until the dead-letter table's own version says whether it landed.

Pure state (no Spark, no clock of its own): the writer holds the lock, runs the commits and
reads the table; kafka-delta-ingest keeps the same concern in one module (src/dead_letters.rs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PendingDeadLetters:
    """One batch's dead letters, collected inline, whose table commit is done and whose
    dead-letter commit is not."""

    batch_id: int
    records: tuple[Any, ...]


@dataclass(frozen=True)
class Flush:
    """One commit of waiting dead letters: under ``version``, the records of ``batches``."""

    version: int
    batches: tuple[PendingDeadLetters, ...]

    @property
    def rows(self) -> int:
        """Dead letters in the commit."""
        return sum(len(p.records) for p in self.batches)

    @property
    def batch_ids(self) -> list[int]:
        """The batches whose dead letters the commit holds."""
        return [p.batch_id for p in self.batches]


class DeadLetterLedger:
    """Where one stream's dead letters are, as its writer saw them (see the module docstring).

    ``table_batch``: the last batch the table holds. ``committed_version``: the dead-letter
    table's ``txnVersion`` for the stream as far as this process knows (None: not read).
    """

    def __init__(
        self,
        *,
        table_batch: int,
        committed_version: int | None,
        flush_seconds: float,
        flush_rows: int,
    ) -> None:
        self.table_batch = table_batch
        self.committed_version = committed_version
        self.flush_seconds = flush_seconds  # a waiting dead letter is committed this soon ...
        self.flush_rows = flush_rows  # ... or once this many wait
        self._waiting: list[PendingDeadLetters] = []
        self._waiting_since: float | None = None
        self._settling: int | None = None
        self._in_doubt: Flush | None = None

    @property
    def waiting(self) -> list[PendingDeadLetters]:
        """The batches whose dead letters wait in the driver, oldest first."""
        return list(self._waiting)

    @property
    def waiting_rows(self) -> int:
        """Dead letters waiting in the driver."""
        return sum(len(p.records) for p in self._waiting)

    @property
    def in_doubt(self) -> Flush | None:
        """A commit attempt whose outcome is unknown: :meth:`resolve` it before the next."""
        return self._in_doubt

    def table_committed(
        self, batch_id: int, *, refused: int, inline: tuple[Any, ...] | None, now: float
    ) -> None:
        """Batch ``batch_id``'s table commit landed. Its ``refused`` records were all collected
        (``inline``: they wait here) or are to be read again from Kafka and committed under the
        batch's own version (``inline`` None: the batch settles until :meth:`settled`)."""
        self.table_batch = batch_id
        if inline is not None and inline:
            self._waiting.append(PendingDeadLetters(batch_id, inline))
            if self._waiting_since is None:
                self._waiting_since = now
        elif refused:
            self._settling = batch_id

    def settled(self, batch_id: int) -> None:
        """Batch ``batch_id``'s own dead-letter commit (under its own version) landed."""
        if self._settling == batch_id:
            self._settling = None
        self._advance(batch_id)

    def plan(self, *, upto: int | None, due_only: bool, now: float) -> Flush | None:
        """The next commit of waiting dead letters, or None (nothing waits, or with
        ``due_only``, nothing is due). ``upto``: its version (default: as far as the invariant
        allows: the table's last batch, or the one before a settling batch). The plan is in
        doubt until :meth:`landed` (or :meth:`resolve` after a failure)."""
        if self._in_doubt is not None:
            raise RuntimeError("an earlier dead-letter commit is in doubt: resolve it first")
        if not self._waiting:
            return None
        if due_only:
            age = now - (self._waiting_since if self._waiting_since is not None else now)
            if age < self.flush_seconds and self.waiting_rows < self.flush_rows:
                return None
        version = upto if upto is not None else self.table_batch
        if self._settling is not None:
            version = min(version, self._settling - 1)
        if version < self._waiting[-1].batch_id:
            raise RuntimeError(
                f"dead letters of batch {self._waiting[-1].batch_id} cannot commit under "
                f"version {version}"
            )
        self._in_doubt = Flush(version, tuple(self._waiting))
        return self._in_doubt

    def landed(self, flush: Flush) -> None:
        """``flush`` committed: its batches no longer wait."""
        done = {p.batch_id for p in flush.batches}
        self._waiting = [p for p in self._waiting if p.batch_id not in done]
        if not self._waiting:
            self._waiting_since = None
        if self._in_doubt == flush:
            self._in_doubt = None
        self._advance(flush.version)

    def resolve(self, committed_version: int | None) -> bool:
        """Settle the attempt in doubt by the dead-letter table's ``txnVersion`` for the stream,
        read after it: whether it landed. One that landed is never written again; one that did
        not is planned afresh (under whatever version is then allowed, with whatever waits)."""
        attempt = self._in_doubt
        if attempt is None:
            return False
        self._in_doubt = None
        if committed_version is not None and committed_version >= attempt.version:
            self.landed(attempt)
            return True
        return False

    def _advance(self, version: int) -> None:
        if self.committed_version is None or version > self.committed_version:
            self.committed_version = version
