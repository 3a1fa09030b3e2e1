"""Re-embedding a memory in place (``compassmem reembed``): the embedded memory of a data directory, built with one
embedding model, rebuilt with the model the settings choose now.

A store's vectors come from one model (``VectorStore.claim_vector_space``), so a memory refuses to open with another.
This reads every tenant's stored turns from the old memory (what a forget or a redaction deleted is not there to
read: it does not come back) and adds them, conversation by conversation, to a new memory in a sibling directory
through the normal write path (``Memory.add``: the events, relations and topics are built again, by the new model's
vectors). Then the directories are swapped by two renames, and the old one is deleted unless it is kept:

    D                     the memory, as settings name it (COMPASSMEM_DATA_DIR)
    D.reembed-new         the new memory while it is built (removed if the build stops)
    D.reembed-backup      the old memory between the renames (kept with ``keep_backup``)
    D.reembed-trash       the old memory while it is deleted

At every point one of them holds a whole memory: until the first rename D is untouched; between the renames the old
memory is whole in the backup and the new one in D.reembed-new (a later run refuses and says how to finish or undo);
after the second, D holds the new memory. What else D holds beside the stores (logs, the worker's folder) is copied
into the new memory before the swap. The stores stay open while the memory is read and rebuilt, and the vector
store's lock is held again across the renames, so no other process writes to the old memory meanwhile.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from compassmem.core.config import DATA_DIR_VARIABLE, ENV_PREFIX, Settings
from compassmem.core.contracts.search import SearchScope
from compassmem.core.models import IndexedTurn, Turn
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.sinks.event_payload import DENSE_VECTOR, PointStore
from compassmem.sinks.factory import Stores, open_stores
from compassmem.sinks.qdrant_edge_backend import VECTOR_SPACE_FILE
from compassmem.sinks.vector_store import REEMBED_COMMAND, space_parts
from compassmem.system.dev_server import FILE_NAME as DEV_FILE_NAME, running_dev
from compassmem.transfer.exporter import find_legacy_ids

log = structlog.get_logger(__name__)

NEW_SUFFIX = ".reembed-new"
BACKUP_SUFFIX = ".reembed-backup"
TRASH_SUFFIX = ".reembed-trash"
# The entries of a data directory the new memory brings of its own; the others are copied into it. The dev
# announcement is not: a dev that holds the directory refuses the command.
VECTOR_DIR, GRAPH_DIR, VECTOR_LOCK = "qdrant", "falkordb", "qdrant.lock"
NOT_CARRIED = frozenset({VECTOR_DIR, VECTOR_LOCK, GRAPH_DIR, DEV_FILE_NAME})
# The shard's own record of its layout (qdrant-edge writes it): the dimension of the old vectors.
EDGE_CONFIG_FILE = "edge_config.json"

SERVER_ROUTE = (
    f"`{REEMBED_COMMAND}` rebuilds the embedded stores of a data directory, and {ENV_PREFIX}QDRANT_URL / "
    f"{ENV_PREFIX}FALKORDB_URL name server stores: take the memory through one: `compassmem export --tenant T --out "
    "T.jsonl` for each tenant, `compassmem --data-dir DIR import T.jsonl` with those URLs unset and the old model, "
    f"`compassmem --data-dir DIR reembed` with the new model, `compassmem --data-dir DIR export --tenant T --out "
    f"T-new.jsonl`, then `compassmem import T-new.jsonl` with the URLs set to a new collection "
    f"({ENV_PREFIX}QDRANT_COLLECTION) and an empty FalkorDB (docs/operations.md)")


class ReembedRefused(RuntimeError):
    """The memory cannot be re-embedded as things are (server stores, a running dev, ids an import would refuse, a
    swap left half done); the message says why and what to do, in one line. Nothing was changed."""


@dataclass(frozen=True)
class ReembedPaths:
    data_dir: Path
    new: Path
    backup: Path
    trash: Path

    @classmethod
    def of(cls, data_dir: Path) -> ReembedPaths:
        # Absolute, without following a link: the siblings lie beside the directory the settings name.
        root = Path(os.path.abspath(data_dir))
        return cls(root, *(root.with_name(root.name + suffix) for suffix in (NEW_SUFFIX, BACKUP_SUFFIX, TRASH_SUFFIX)))


@dataclass(frozen=True)
class ReembedSummary:
    """What a re-embedding did: ``old_space`` -> ``new_space`` ('embedder:model'), how much memory it rebuilt and in
    how long; ``backup``: where the old memory was kept, if it was; ``unchanged``: the memory was built with the
    chosen model already (nothing was done)."""

    data_dir: Path
    old_space: str | None
    new_space: str
    tenants: int = 0
    conversations: int = 0
    turns: int = 0
    seconds: float = 0.0
    backup: Path | None = None
    unchanged: bool = False


def with_model(settings: Settings, *, embedder: str | None = None, embedding_model: str | None = None) -> Settings:
    """``settings`` with the embedder and model given instead of theirs, checked as a whole again (dialogue-minilm
    needs onnx-int8): a pydantic ValidationError otherwise."""
    changes = {key: value for key, value in (("embedder", embedder), ("embedding_model", embedding_model))
               if value is not None}
    if not changes:
        return settings
    return Settings.model_validate({**settings.model_dump(), **changes})


def recorded_space(data_dir: Path) -> str | None:
    """The embedder that made the vectors of the memory in ``data_dir``, as the vector store recorded it."""
    try:
        return str(json.loads((data_dir / VECTOR_DIR / VECTOR_SPACE_FILE).read_text())["vector_space"])
    except FileNotFoundError:
        return None


def stored_dim(data_dir: Path) -> int | None:
    """The dimension of the vectors of the memory in ``data_dir``, from the shard's layout; None when unknown."""
    try:
        return int(json.loads((data_dir / VECTOR_DIR / EDGE_CONFIG_FILE).read_text())["vectors"][DENSE_VECTOR]["size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


Progress = Callable[[str, int, int], None]
"""``progress(tenant, conversations_done, conversations_of_tenant)``, after each conversation is rebuilt."""


def reembed(settings: Settings, *, keep_backup: bool = False, progress: Progress | None = None) -> ReembedSummary:
    """Rebuild the memory of ``settings.data_dir`` with the embedder and model ``settings`` choose, in place.

    ReembedRefused (nothing changed) for server stores, a running ``compassmem dev``, no memory there, ids stored
    before the id rule, or the leftovers of an earlier run that stopped half way. A failure or an interruption
    (KeyboardInterrupt) carries a note (``add_note``) saying which memory is whole and where, and what to do."""
    if settings.qdrant_url or settings.falkordb_url:
        raise ReembedRefused(SERVER_ROUTE)
    paths = ReembedPaths.of(settings.data_dir)
    where = f"{DATA_DIR_VARIABLE}={paths.data_dir}"
    _refuse_while_dev_runs(paths, where)
    _refuse_a_half_done_swap(paths, where)
    if paths.trash.exists():  # an old memory whose deletion was cut short: garbage by its name
        log.info("reembed.old_memory_deleted", path=str(paths.trash))
        shutil.rmtree(paths.trash, ignore_errors=True)
    if not (paths.data_dir / VECTOR_DIR).is_dir():
        raise ReembedRefused(f"{where} holds no memory to re-embed")
    old_space, new_space = recorded_space(paths.data_dir), settings.vector_space
    if old_space == new_space:
        return ReembedSummary(paths.data_dir, old_space, new_space, unchanged=True)
    _check_leftovers(paths, where)
    parent = paths.data_dir.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ReembedRefused(f"{where}: the new memory is built beside it, in {paths.new}, and this process may not "
                             f"create files in {parent}")
    started = time.perf_counter()
    embedder = make_embedder(settings)  # a model that is not there fails before anything is opened
    old_embedder, old_model = space_parts(old_space) if old_space else (settings.embedder, settings.embedding_model)
    # The old stores are only read: the model that made them is not needed, only their record and dimension.
    reading = settings.model_copy(update={"embedder": old_embedder, "embedding_model": old_model})
    stage = _Stage(paths, old_space, new_space)
    with open_stores(reading, dim=stored_dim(paths.data_dir) or embedder.dim) as old:
        tenants = _plan(old, where)
        if paths.new.exists():  # a build that stopped before its swap (killed): only this run could touch it now
            log.info("reembed.stale_build_removed", path=str(paths.new))
            shutil.rmtree(paths.new)
        try:
            counts = _build(old, tenants, settings, embedder, paths.new, progress)
            _carry_other_files(paths)
        except BaseException as error:
            shutil.rmtree(paths.new, ignore_errors=True)
            error.add_note(stage.building())
            raise
    _swap(paths, stage)
    kept = paths.backup if keep_backup else None
    if not keep_backup:
        _delete_old(paths, stage)
    seconds = time.perf_counter() - started
    summary = ReembedSummary(paths.data_dir, old_space, new_space, tenants=len(tenants), conversations=counts[0],
                             turns=counts[1], seconds=seconds, backup=kept)
    log.info("reembed.done", data_dir=str(paths.data_dir), old_space=old_space, new_space=new_space,
             tenants=summary.tenants, conversations=summary.conversations, turns=summary.turns,
             seconds=round(seconds, 2))
    return summary


def _refuse_while_dev_runs(paths: ReembedPaths, where: str) -> None:
    server = running_dev(paths.data_dir)
    if server is not None:
        raise ReembedRefused(f"{where} is held by `compassmem dev` (pid {server.pid}): stop it (kill {server.pid}), "
                             f"then run `{REEMBED_COMMAND}` again")


def _refuse_a_half_done_swap(paths: ReembedPaths, where: str) -> None:
    """ReembedRefused when an earlier run stopped between its renames: both memories whole, a person chooses."""
    if not (paths.backup.exists() and paths.new.exists()):
        return
    if paths.data_dir.is_dir() and not any(paths.data_dir.iterdir()):
        paths.data_dir.rmdir()  # made empty by a command run since (it creates its data directory)
    other = (f", and {paths.data_dir} holds other files (move them aside first)" if paths.data_dir.exists() else
             f", and {paths.data_dir} is not there")
    raise ReembedRefused(
        f"{where}: an earlier `{REEMBED_COMMAND}` stopped between its two renames: the old memory is whole in "
        f"{paths.backup} and the re-embedded one in {paths.new}{other}; finish it with `mv {paths.new} "
        f"{paths.data_dir} && rm -rf {paths.backup}`, or undo it with `mv {paths.backup} {paths.data_dir} && "
        f"rm -rf {paths.new}`")


def _check_leftovers(paths: ReembedPaths, where: str) -> None:
    """ReembedRefused for an old memory kept by an earlier run, which a person deletes (or keeps elsewhere)."""
    if paths.backup.exists():
        raise ReembedRefused(
            f"{where}: {paths.backup} holds the memory as it was before an earlier `{REEMBED_COMMAND}` (kept with "
            f"--keep-backup, or its deletion was interrupted): delete it (`rm -rf {paths.backup}`) or move it "
            f"elsewhere, then run `{REEMBED_COMMAND}` again")


def _plan(old: Stores, where: str) -> dict[str, list[str]]:
    """Each tenant with a stored turn -> its conversations, by id; ReembedRefused for ids stored before the id rule,
    which ``Turn`` refuses (``compassmem migrate-ids`` rewrites them)."""
    vectors = old.vectors
    if not isinstance(vectors, PointStore):  # the embedded store is one; a test's stand-in may not be
        raise ReembedRefused(f"{where}: the vector store cannot list its tenants")
    plan: dict[str, list[str]] = {}
    legacy: dict[str, list[str]] = {}
    for tenant in vectors.turn_tenants():
        scan = find_legacy_ids(old, tenant)
        if scan.legacy:
            legacy[tenant] = [ids.named for ids in scan.legacy.values()]
        plan[tenant] = sorted(scan.conversations)
    if legacy:
        named = [f"{name} of tenant {tenant!r}" for tenant, names in legacy.items() for name in names]
        shown = ", ".join(named[:5]) + (f" and {len(named) - 5} more" if len(named) > 5 else "")
        raise ReembedRefused(f"{where} holds ids stored before the id rule, which no turn can carry again ({shown}): "
                             "rewrite or forget them first with "
                             + ", ".join(f"`compassmem migrate-ids --tenant {tenant}`" for tenant in legacy))
    return plan


def _turn(stored: IndexedTurn) -> Turn:
    """The turn as it was added, from what the store keeps of it: its text is the indexed one (with the captions of
    what it shared), which the new memory indexes and shows as the old one did."""
    return Turn(tenant=stored.tenant, conversation_id=stored.conversation_id, turn_id=stored.turn_id,
                speaker=stored.speaker, text=stored.text, timestamp=stored.timestamp, session_id=stored.session_id,
                subject_id=stored.subject_id, metadata=stored.metadata)


def _build(old: Stores, plan: dict[str, list[str]], settings: Settings, embedder: Embedder, target: Path,
           progress: Progress | None) -> tuple[int, int]:
    """The new memory in ``target``, conversation by conversation; (conversations, turns) rebuilt. RuntimeError
    when the new memory does not hold as many turns of a conversation as the old one did."""
    from compassmem.library.memory import Memory

    vectors = old.vectors
    assert isinstance(vectors, PointStore)
    # The build writes to a directory of its own; a stream's commands are none of its business.
    building = settings.model_copy(update={"data_dir": target, "kafka_bootstrap": None})
    conversations = turns = 0
    with Memory(building, embedder=embedder) as new:
        for tenant, conversation_ids in plan.items():
            for done, conversation_id in enumerate(conversation_ids, start=1):
                stored = vectors.conversation_turns_without_vectors(tenant, conversation_id)
                if stored:
                    new.add([_turn(turn) for turn in stored], warm=False)
                    written = new.stores.vectors.count_turns(SearchScope.conversation(tenant, conversation_id))
                    if written != len(stored):
                        raise RuntimeError(f"conversation {conversation_id!r} of tenant {tenant!r}: {len(stored)} "
                                           f"turns read, {written} written")
                    conversations, turns = conversations + 1, turns + len(stored)
                if progress is not None:
                    progress(tenant, done, len(conversation_ids))
        new.stores.vectors.flush()
    return conversations, turns


def _carry_other_files(paths: ReembedPaths) -> None:
    """Copy what the data directory holds beside the stores (the dev broker's log, the worker's folder) into the new
    memory, so that the swap changes the stores only."""
    for entry in sorted(paths.data_dir.iterdir()):
        # qdrant.* beside the shard: what a compaction leaves, settled when the old store was opened.
        if entry.name in NOT_CARRIED or entry.name.startswith((".write-probe-", f"{VECTOR_DIR}.")) \
                or (paths.new / entry.name).exists():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, paths.new / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, paths.new / entry.name, follow_symlinks=False)


class _Stage:
    """What an interruption at each step leaves, in the words a person needs."""

    def __init__(self, paths: ReembedPaths, old_space: str | None, new_space: str) -> None:
        self.paths, self.old_space, self.new_space = paths, old_space, new_space

    def building(self) -> str:
        return (f"reembed stopped before the new memory took the old one's place: {self.paths.data_dir} is "
                f"unchanged (the memory made by {self.old_space or 'the old model'}, whole); run "
                f"`{REEMBED_COMMAND}` again to re-embed it")

    def between(self) -> str:
        p = self.paths
        return (f"reembed stopped between its two renames: the old memory is whole in {p.backup}, the re-embedded "
                f"one ({self.new_space}) in {p.new}; finish with `mv {p.new} {p.data_dir} && rm -rf {p.backup}`, or "
                f"undo with `mv {p.backup} {p.data_dir} && rm -rf {p.new}`")

    def deleting(self) -> str:
        p = self.paths
        return (f"reembed stopped while deleting the old memory: {p.data_dir} holds the re-embedded memory "
                f"({self.new_space}), whole; delete what is left of the old one: `rm -rf {p.backup} {p.trash}`")


def _lock_vectors(data_dir: Path, where: str) -> int:
    """Hold the vector store's lock (as ``EdgeVectorStore`` does) while the directories move: a process that opened
    the memory between the build and the swap would write to the old memory, and be moved with it."""
    handle = os.open(data_dir / VECTOR_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        raise ReembedRefused(f"{where} was opened by another process while the new memory was built: it is "
                             f"unchanged; stop that process and run `{REEMBED_COMMAND}` again") from None
    return handle


def _rename(source: Path, target: Path) -> None:
    os.rename(source, target)


def _sync_directory(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _swap(paths: ReembedPaths, stage: _Stage) -> None:
    """Old memory to the backup name, new memory into place. Undone when the second rename fails; an interruption
    between the two is told (``_Stage.between``), and a later run says the same."""
    where = f"{DATA_DIR_VARIABLE}={paths.data_dir}"
    try:
        handle = _lock_vectors(paths.data_dir, where)
    except BaseException:
        shutil.rmtree(paths.new, ignore_errors=True)
        raise
    try:
        try:
            _refuse_while_dev_runs(paths, where)
            _rename(paths.data_dir, paths.backup)
        except BaseException as error:
            shutil.rmtree(paths.new, ignore_errors=True)
            if not isinstance(error, ReembedRefused):
                error.add_note(stage.building())
            raise
        try:
            _rename(paths.new, paths.data_dir)
        except BaseException as error:
            try:
                _rename(paths.backup, paths.data_dir)
            except BaseException:
                error.add_note(stage.between())
                raise error from None
            shutil.rmtree(paths.new, ignore_errors=True)
            error.add_note(stage.building())
            raise
        _sync_directory(paths.data_dir.parent)
    finally:
        os.close(handle)


def _delete_old(paths: ReembedPaths, stage: _Stage) -> None:
    """Delete the old memory: renamed to the trash name first, so that what an interrupted deletion leaves is known
    to be garbage (the next run deletes it)."""
    try:
        _rename(paths.backup, paths.trash)
        shutil.rmtree(paths.trash)
    except BaseException as error:
        error.add_note(stage.deleting())
        raise
