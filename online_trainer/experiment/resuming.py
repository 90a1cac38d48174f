"""Continuing an experiment that was cut off: the same call, the runs left, and outputs cut back.

``multi_run(..., resume=True)``, ``sweep(..., resume=True)`` and ``online-trainer resume`` go
through here, holding the experiment's lock: finished runs stay as they are; each other run
that had started continues from its full checkpoint (``Run{i}_Resume.pkl``) when it has one,
or starts again, its partial outputs removed. Every output of a run that continues is cut back
to its checkpoint: the streams by the run itself, the callback's files here, before any run
starts (:meth:`online_trainer.callbacks.CallBack.rewind`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import yaml

from online_trainer.callbacks.multi import sinks_not_cut_back
from online_trainer.callbacks.rewind import rewind_run
from online_trainer.experiment import ownership, slurm_states
from online_trainer.experiment.job_results import apply_result, read_job_result
from online_trainer.experiment.lock import hold_lock
from online_trainer.experiment.manifest import (
    created_at,
    refuse_a_sweep,
    refuse_a_sweep_configuration,
    set_aside_here,
    settle_set_aside,
)
from online_trainer.options import validation
from online_trainer.options.derived import EVAL_ENV_GIVEN, LEGACY_NAMES
from online_trainer.options.groups import SECTIONS
from online_trainer.records import storage
from online_trainer.run import env_identity, full_checkpoint
from online_trainer.run.one_run import COMPLETED

logger = logging.getLogger(__name__)

NEW_EXPERIMENT = "start a new experiment (another exp_dir, or overwrite=True)"
"""What a refused resume says to do instead of continuing (a sweep's refusal says its own)."""
CALL_KEY = "call"
"""The manifest's record of what a resumed call must repeat (:func:`online_trainer.options.derived.call_record`)."""


def check_same_call(
    exp_dir: Path,
    manifest: Mapping[str, Any],
    num_runs: int,
    base_seed: int | None,
    call: Mapping[str, Any],
    env: Callable[[], dict[str, Any]] | None = None,
    continuing: str = "resume=True",
    anew: str = NEW_EXPERIMENT,
) -> None:
    """Raise when a resumed call differs from the one that made the experiment.

    ``call`` is :func:`~online_trainer.options.derived.call_record` of this call: every option that can change
    what runs record (an option declared ``affects_records=False`` may differ). A manifest of the previous
    release, whose record has flat keys (``eval_freq``), is read through the legacy names. Keys the experiment
    did not record (options added since) are not compared.

    Args:
        env: what this call's env says of itself (:func:`env_description`: builds one env); compared with the env
            the experiment ran on (its ``env.json``, its manifest's number of sub-envs, a full checkpoint's), when
            something says what that was.
        continuing: how the refusal names the call that continues the experiment (``"resume=True"``; a sweep
            called again without it says so).
        anew: how the refusal says to start a new experiment instead (a sweep has no ``overwrite``).

    Raises:
        ValueError: naming the first option that differs and both values.
    """

    def refuse(name: str, before: Any, now: Any, described: bool = False) -> None:
        said = (str(before), str(now)) if described else (repr(before), repr(now))  # described: words, not values
        raise ValueError(
            f"{continuing} continues the experiment in {os.fspath(exp_dir)!r}, which ran with "
            f"{name}={said[0]}, but this call has {name}={said[1]}: call it as it was called, or {anew}."
        )

    if num_runs != manifest["num_runs"]:
        refuse("num_runs", manifest["num_runs"], num_runs)
    if base_seed is not None and base_seed != manifest["base_seed"]:
        refuse("seed_offset", manifest["base_seed"], base_seed)
    if CALL_KEY not in manifest:
        _check_unrecorded_call(exp_dir, call, refuse)
    for name, before in manifest.get(CALL_KEY, {}).items():
        key = LEGACY_NAMES.get(name, name) if name not in call else name
        now = call.get(key, False if key in SECTIONS else None)
        if key == "hooks":
            if not _same_hooks(before or {}, now or {}):
                _refuse_hooks(exp_dir, before or {}, now or {}, continuing, anew)
        elif key == EVAL_ENV_GIVEN and now is not None and now != before:
            refuse("evaluation.env", _eval_env(before), _eval_env(now), described=True)
        elif now != before:
            refuse(key, before, now)
    if env is None:
        return
    recorded = recorded_num_envs(exp_dir, manifest)
    if recorded is None and env_identity.recorded_identity(exp_dir, quiet=True) is None:
        return  # nothing says what env it ran on: each run records it when it builds its own
    now = env()
    if recorded is not None and now["num_envs"] != recorded:
        refuse("num_envs (of the env)", recorded, now["num_envs"])
    env_identity.check_identity(exp_dir, now, "this call", continuing)


def _eval_env(given: bool) -> str:
    return "an env factory of its own" if given else "None (the training env's factory)"


def _same_hooks(before: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether the hooks with state of a resumed call are those recorded: the same keys and classes, and every
    argument recorded made the same. An argument this call has that the record lacks is not compared: an earlier
    version did not record numpy numbers."""
    return before.keys() == now.keys() and all(
        before[key].get("class") == now[key].get("class")
        and all(
            name in now[key]["params"] and _same_value(now[key]["params"][name], value)
            for name, value in before[key]["params"].items()
        )
        for key in before
    )


def _same_value(a: Any, b: Any) -> bool:
    """Equal plain data, NaN equal to NaN (a hook made with ``threshold=float("nan")`` resumes with it)."""
    return bool(a == b) or json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _refuse_hooks(exp_dir: Path, before: Mapping[str, Any], now: Mapping[str, Any], continuing: str, anew: str) -> None:
    """Raise, naming the first difference, when the hooks with state of a resumed call are not those recorded
    (``continuing`` and ``anew`` as for :func:`check_same_call`).

    Raises:
        ValueError: a hook with state left out, added, or made with other arguments.
    """
    differences = [f"{key} is left out" for key in before if key not in now]
    differences += [f"{key} is added" for key in now if key not in before]
    differences += [
        f"{key} was made with {_arguments(before[key]['params'])}, this call's with {_arguments(now[key]['params'])}"
        for key in before
        if key in now and not _same_hooks({key: before[key]}, {key: now[key]})
    ]
    raise ValueError(
        f"{continuing} continues the experiment in {os.fspath(exp_dir)!r}, whose runs "
        + (
            f"keep the state of their hooks {sorted(before)}"
            if before
            else "were started with no hook that keeps state"
        )
        + f", but this call's hooks with state differ: {'; '.join(differences)}. Call it with "
        "the hooks the experiment was started with, made with the same arguments (hooks without state_dict may "
        f"change), or {anew}."
    )


def _arguments(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in params.items()) or "no arguments it keeps"


def _check_unrecorded_call(exp_dir: Path, call: Mapping[str, Any], refuse: Callable[[str, Any, Any], None]) -> None:
    """Check a call to resume an experiment whose manifest recorded no call (written by an earlier version).

    The command's ``config.yaml`` says the budget; a sweep's configuration was checked against its
    ``sweep.json``. Without either, nothing says how the experiment was called, and the call is refused: a
    resume with another budget would have replaced its runs' records with those of another experiment.
    """
    config_file = exp_dir / storage.CONFIG_YAML
    if config_file.is_file():
        data = yaml.safe_load(config_file.read_text()) or {}
        for name in ("total_steps", "num_episodes", "checkpoint_freq"):
            if isinstance(data, dict) and data.get(name) != call.get(name):
                refuse(name, data.get(name), call.get(name))
        return
    if (exp_dir.parent / "sweep.json").is_file():
        return
    raise ValueError(
        f"resume=True continues the experiment in {os.fspath(exp_dir)!r}, but it was written by an earlier version "
        "of online_trainer that recorded neither its budget nor its options (its manifest.json has no 'call'), so "
        "this call cannot be checked against it, and its runs cut off have no full checkpoint to continue from. "
        "Its records stay readable (load_episodes, online-trainer show and report). To run its seeds to the end, "
        "start a new experiment: another exp_dir, or overwrite=True."
    )


def recorded_num_envs(exp_dir: Path, manifest: Mapping[str, Any]) -> int | None:
    """The number of sub-envs the experiment ran with: the manifest's (a run ended), else a full checkpoint's."""
    if manifest.get("num_envs") is not None:
        return int(manifest["num_envs"])
    for entry in manifest["runs"]:
        header = full_checkpoint.read(exp_dir, entry["run"], header_only=True)
        if header is not None:
            return header.num_envs
    return None


def env_description(env_factory: Any) -> dict[str, Any]:
    """What the env ``env_factory`` builds says of itself (:func:`~online_trainer.run.env_identity.env_identity`;
    one env is built and released)."""
    env = env_factory()
    try:
        return env_identity.env_identity(env)
    finally:
        try:
            env_factory.release(env)
        except Exception as exc:  # the runs' own envs say it again; this one was only looked at
            logger.error("the env built to check the experiment: its close() raised %s: %s", type(exc).__name__, exc)


def check_resumable(exp_dir: str | os.PathLike | None) -> None:
    """Raise, before anything is created or locked, when ``exp_dir`` holds no experiment to resume.

    Raises:
        ValueError: ``exp_dir`` is None.
        FileNotFoundError: it holds no manifest (or does not exist).
        ExperimentExistsError: it holds a sweep, or is one of a sweep's configurations.
    """
    validation.needs_exp_dir(exp_dir, resume=True)
    assert exp_dir is not None  # needs_exp_dir raised otherwise
    refuse_a_sweep(Path(exp_dir), "multi_run(resume=True)")
    # its runs would log under the configuration's own tags, beside the sweep's sinks, and count as the sweep's (F17)
    refuse_a_sweep_configuration(Path(exp_dir), "multi_run(resume=True)")
    if not set_aside_here(Path(exp_dir)):  # else the lock's check puts the experiment back first, then reads it
        read_manifest(Path(exp_dir))


def hold_resumable(
    exp_dir: str | os.PathLike | None, check: Callable[[], object] | None = None
) -> AbstractContextManager[list[Path]]:
    """:func:`check_resumable`, then the experiment's lock (:func:`~online_trainer.experiment.lock.hold_lock`),
    whose check puts back an experiment an ``overwrite=True`` call killed while it held it aside
    (:func:`~online_trainer.experiment.manifest.settle_set_aside`), then runs ``check``, which refuses the call
    before the lock writes anything."""
    check_resumable(exp_dir)
    assert exp_dir is not None  # check_resumable raised otherwise
    path = Path(exp_dir)

    def settled_then_checked() -> None:
        settle_set_aside(path, cut_off=True)
        read_manifest(path)
        if check is not None:
            check()

    return hold_lock(path, check=settled_then_checked)


def read_manifest(exp_dir: Path) -> dict[str, Any]:
    """The manifest of the experiment to resume.

    Raises:
        FileNotFoundError: there is none: nothing to resume.
    """
    if not (exp_dir / storage.MANIFEST_FILE).is_file():
        left = [path.name for path in storage.existing_experiment_files(exp_dir)]
        if left:  # an experiment's files without the record of its runs: a new call would be refused for them
            shown = ", ".join(left[:3]) + (", ..." if len(left) > 3 else "")
            raise FileNotFoundError(
                f"resume=True, but exp_dir={os.fspath(exp_dir)!r} holds files of an experiment ({shown}) without its "
                f"{storage.MANIFEST_FILE}, which records its runs and how each ended: put back a copy of it to "
                "resume; or pass overwrite=True (without resume) to replace the experiment (its files are deleted), "
                "or choose another exp_dir."
            )
        raise FileNotFoundError(
            f"resume=True, but exp_dir={os.fspath(exp_dir)!r} holds no experiment (no "
            f"{storage.MANIFEST_FILE}): run it without resume first."
        )
    return storage.read_manifest(exp_dir)


def runs_left(
    manifest: dict[str, Any],
    exp_dir: Path,
    continue_runs: bool = True,
    hooks: Sequence[Any] = (),
    callback: Any = None,
    label: str = "",
) -> dict[int, full_checkpoint.CheckpointHeader | None]:
    """The runs of an earlier manifest to do, each with the header of the checkpoint it continues from (or None).

    The caller holds the experiment's lock: runs the manifest says are ``running`` were cut
    off with their writer, and are marked ``interrupted`` (in place). A run that starts again
    loses its partial streams and its checkpoint.

    Args:
        manifest: the experiment's manifest.
        exp_dir: the experiment directory.
        continue_runs: continue runs from their full checkpoints (False: every run left starts again).
        hooks: the user hooks of the call: those with state must be the ones each checkpoint holds.
        callback: the call's callback: it must take the position each checkpoint holds for it.
        label: put before ``run {i}`` in warnings and errors (a sweep's configuration, as in its runs' names).

    Raises:
        ValueError: a checkpoint holds the state of other user hooks than ``hooks``, or a position
            ``callback`` cannot rewind to (both checked before anything is removed).
    """
    for entry in manifest["runs"]:  # a Slurm job or Ray task that ended after the process that started it: it counts
        if entry["status"] not in COMPLETED:
            result = read_job_result(exp_dir, entry["run"])
            if result is not None and result.status in COMPLETED:
                apply_result(manifest, result)
    slurm_states.settle_ended_jobs(exp_dir, manifest)  # cancelled jobs are named as such
    ownership.settle_running(exp_dir, manifest, owned=True)
    entries = {entry["run"]: entry for entry in manifest["runs"] if _to_do(entry, manifest, exp_dir)}
    left: dict[int, full_checkpoint.CheckpointHeader | None] = {}
    for run in entries:
        left[run] = _checked_header(exp_dir, run, hooks, callback, label) if continue_runs else None
    for run, header in left.items():  # every check passed: now the runs that start again lose their outputs
        entry = entries[run]
        if header is None:
            if entry["status"] in COMPLETED:  # its stream is gone: what it wrote besides is replaced
                logger.warning(
                    "%s (%s) has no %s on disk (removed since it ended?): it runs again from step 0, and replaces its "
                    "checkpoints and what the callback logged of it",
                    _run_name(run, label),
                    entry["status"].replace("_", " "),
                    storage.metrics_path(exp_dir, run).name,
                )
            elif entry["status"] != "pending" and storage.metrics_path(exp_dir, run).is_file():
                if continue_runs or not storage.resume_path(exp_dir, run).is_file():
                    why = "it has no full checkpoint to continue from"
                else:  # a sweep called again without resume=True
                    why = "this call does not continue runs (resume=True would continue it from its full checkpoint)"
                logger.warning(
                    "%s (%s) starts again from step 0, as %s, and replaces the records it has on disk and what the "
                    "callback logged of it",
                    _run_name(run, label),
                    entry["status"],
                    why,
                )
            full_checkpoint.restart_point(exp_dir, run, continue_run=False)
        else:  # the resume point, in the manifest: where the records of a restarted env begin
            entry["resumed_from"] = header.resume_point
            logger.info(
                "%s continues from its checkpoint at step %d (%d episodes)",
                _run_name(run, label),
                header.global_step,
                header.episodes,
            )
    return left


def check_checkpoints(
    exp_dir: Path, manifest: Mapping[str, Any], hooks: Sequence[Any] = (), callback: Any = None, label: str = ""
) -> None:
    """Raise unless every run of ``manifest`` that would continue from its full checkpoint takes the call's
    ``hooks`` and ``callback``, and its checkpoint is of this version: the checks of :func:`runs_left`, reading
    only, so that the experiment's lock can refuse the call before it writes anything. ``label`` names the
    runs as in :func:`runs_left`.

    Raises:
        ValueError: as :func:`runs_left`, or a checkpoint of another format version.
    """
    for entry in manifest["runs"]:
        if _to_do(entry, manifest, exp_dir):
            _checked_header(exp_dir, entry["run"], hooks, callback, label)


def _to_do(entry: Mapping[str, Any], manifest: Mapping[str, Any], exp_dir: Path) -> bool:
    """Whether the run of ``entry`` is to do: it did not end, or it ended but its metrics stream is gone.

    A run of an experiment that streams no records (``dump_metrics=False`` in the manifest's call) has none to
    miss: once ended, it is done (it was done again at every resume).
    """
    if entry["status"] not in COMPLETED:
        return True
    streams = (manifest.get(CALL_KEY) or {}).get("dump_metrics", True) is not False
    return streams and not storage.metrics_path(exp_dir, entry["run"]).is_file()


def _run_name(run: int, label: str = "") -> str:
    """``"run 1"``, or with a sweep's ``label`` ``"lr=0.1 run 1"``: the name its :class:`RunSpec` has."""
    return f"{label} run {run}" if label else f"run {run}"


def _checked_header(
    exp_dir: Path, run: int, hooks: Sequence[Any], callback: Any, label: str = ""
) -> full_checkpoint.CheckpointHeader | None:
    """The header of run ``run``'s full checkpoint (None without one), checked against the call's hooks and callback."""
    header = full_checkpoint.read(exp_dir, run, header_only=True, verify=True)
    if header is not None:
        name = _run_name(run, label)
        _check_streams(exp_dir, run, header)
        full_checkpoint.check_hooks(exp_dir, header, hooks, name)
        full_checkpoint.check_callback_position(exp_dir, header, callback, name)
    return header


def _check_streams(exp_dir: Path, run: int, header: full_checkpoint.CheckpointHeader) -> None:
    """Refuse a run whose metrics or evaluation stream is not what its full checkpoint recorded: cut short, or
    damaged before the checkpoint's position. Continued, it would append readable records after unreadable ones."""
    for path, size in (
        (storage.metrics_path(exp_dir, run), header.outputs.get("metrics")),
        (storage.evaluations_path(exp_dir, run), header.outputs.get("evaluations")),
    ):
        problem = None if size is None else storage.stream_problem(path, size)
        if problem is not None:
            checkpoint = storage.resume_path(exp_dir, run).name
            raise ValueError(
                f"{path} does not hold what run {run}'s full checkpoint {checkpoint} recorded: {problem}. The run "
                f"cannot continue from it: put back a copy of {path.name}, or remove {checkpoint} to start the run "
                "again from step 0 (its records and what the callback logged of it are then replaced)."
            )


def rewind_outputs(
    callback: Any,
    manifest: Mapping[str, Any],
    left: Mapping[int, full_checkpoint.CheckpointHeader | None],
    tag_prefix: str = "",
) -> None:
    """Cut the callback's files back to each run's checkpoint; remove every entry of a run that starts again.

    Runs that never started wrote nothing and are skipped. Each cut moves the bytes after it, so
    runs that continue are cut first, the highest-numbered first, and runs that start again last: a
    process writes its runs into its event file in the order of their numbers, so no cut moves what
    a later one finds by its offset. (Files all runs append to are cut by counts, in any order.)
    """
    logged = {
        run: header
        for run, header in left.items()
        if manifest["runs"][run - 1]["status"] != "pending" or header is not None
    }
    lacking = sinks_not_cut_back(callback)
    if logged and lacking:  # W19: write-a-sink.md's own TsvCallBack lost 101 episodes of a run, and nothing said so
        logger.warning(
            "%s cannot be cut back to the runs' checkpoints (%s no checkpoint() and rewind() of %s own): what %s "
            "logged of %s after %s last checkpoint is held twice once %s again, and what %s had not written when "
            "the call stopped is missing. A sink that resumes exactly defines them: see docs/how-to/write-a-sink.md.",
            " and ".join(lacking),
            "they have" if len(lacking) > 1 else "it has",
            "their" if len(lacking) > 1 else "its",
            "they" if len(lacking) > 1 else "it",
            ", ".join(f"{tag_prefix}run_{run}" for run in sorted(logged)),
            "their" if len(logged) > 1 else "its",
            "they run" if len(logged) > 1 else "it runs",
            "they" if len(lacking) > 1 else "it",
        )
    if not callable(getattr(callback, "rewind", None)):
        return
    since = created_at(manifest)  # what shared files held before is another experiment's, whatever its tags
    for run, header in sorted(logged.items(), key=lambda item: (item[1] is None, -item[0])):
        rewind_run(callback, f"{tag_prefix}run_{run}", None if header is None else header.callback_position, since)


BEFORE_REWIND_DIR = ".before_rewind"
"""Where a resumed call keeps the sinks' files as it found them (hard links), until its runs pass their checks."""


class RewoundFiles:
    """The sinks' files as a resumed call found them, kept until its runs are past their first env step.

    A resume cuts the sinks' files back to each run's checkpoint before its runs start (the parent cuts them, in an
    order that keeps every run's offsets), but a run may then be refused before its first env step (its agent or env
    differs from the one it ran with): the refused call must leave the experiment as it found it (E12: a refused
    resume took 2,419 points out of a TensorBoard file whose records kept them). A cut file is rewritten by a
    temporary file swapped in, so a hard link made before keeps the file as found, at no copy; :meth:`restore`
    swaps it back when no run wrote after the cut. A file on another filesystem (a sink's ``log_dir`` elsewhere)
    cannot be linked into the experiment directory: it is not kept.
    """

    def __init__(self, exp_dir: Path, callback: Any) -> None:
        self.dir = exp_dir / BEFORE_REWIND_DIR
        shutil.rmtree(self.dir, ignore_errors=True)  # a killed call's
        written = getattr(callback, "written_files", None)
        self.kept: list[tuple[Path, Path]] = []
        for number, name in enumerate(written() if callable(written) else []):
            path, link = Path(name), self.dir / str(number)
            try:
                self.dir.mkdir(exist_ok=True)
                os.link(path, link)
            except OSError as exc:
                logger.debug("%s is not kept while the resumed runs start: %s", path, exc)
                continue
            self.kept.append((path, link))
        self.cut: dict[Path, tuple[int, int] | None] = {}

    def mark_cut(self) -> None:
        """Note how the files stand once cut back (a file that changed after is a run's writing)."""
        self.cut = {path: _stamp(path) for path, _ in self.kept}

    def restore(self) -> None:
        """Put the files back as found, when no run wrote after the cut; then forget them."""
        try:
            if self.kept and all(_stamp(path) == self.cut.get(path) for path, _ in self.kept):
                for path, link in self.kept:
                    os.replace(link, path)
        except OSError as exc:  # the call's own refusal is the news
            logger.warning("could not put back the sinks' files as the resumed call found them: %s", exc)
        finally:
            self.drop()

    def drop(self) -> None:
        """Forget the files as found (the runs started: the cut stands)."""
        shutil.rmtree(self.dir, ignore_errors=True)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


_rewound: list[RewoundFiles] = []
"""The files of the call in progress (one call at a time in a process), newest last."""


def keep_before_rewind(exp_dir: Path, callback: Any) -> RewoundFiles:
    """Keep the sinks' files as found before a resumed call cuts them (see :class:`RewoundFiles`)."""
    kept = RewoundFiles(exp_dir, callback)
    _rewound.append(kept)
    return kept


def settle_rewound(refused: bool) -> None:
    """End the call's keeping: with ``refused`` (a run failed before its first env step and no run ended), the files
    go back as found, newest keeping first; else the cut stands."""
    while _rewound:
        kept = _rewound.pop()
        if refused:
            kept.restore()
        else:
            kept.drop()


def cut_back_outputs(
    exp_dir: Path,
    callback: Any,
    manifest: Mapping[str, Any],
    left: Mapping[int, full_checkpoint.CheckpointHeader | None],
    tag_prefix: str = "",
) -> None:
    """Keep the sinks' files as found (:func:`keep_before_rewind`), then cut them back for the runs ``left``
    (:func:`rewind_outputs`). With no run left nothing is done: a resume of a finished experiment writes nothing
    (it made and removed a folder in it, tester V14)."""
    if not left:
        return
    kept = keep_before_rewind(exp_dir, callback)
    rewind_outputs(callback, manifest, left, tag_prefix)
    kept.mark_cut()


def resumed_manifest(exp_dir: Path, callback: Any, hooks: Sequence[Any] = ()) -> tuple[dict[str, Any], dict[int, int]]:
    """The manifest of the experiment ``multi_run(..., resume=True)`` continues, and the runs left with their seeds.

    The call was checked against the manifest (:func:`check_same_call`) when its lock was taken. This settles
    runs cut off, and cuts the callback's files back (see :func:`runs_left`, :func:`rewind_outputs`).

    Raises:
        FileNotFoundError: no experiment in ``exp_dir``.
        ValueError: its user hooks with state differ from those a run's checkpoint holds; nothing is changed then.
    """
    manifest = read_manifest(exp_dir)
    left = runs_left(manifest, exp_dir, hooks=hooks, callback=callback)
    cut_back_outputs(exp_dir, callback, manifest, left)
    done = manifest["num_runs"] - len(left)
    logger.info(
        "resume: %d runs finished earlier, %d continue from a checkpoint, %d start again",
        done,
        sum(header is not None for header in left.values()),
        sum(header is None for header in left.values()),
    )
    return manifest, {run: manifest["seeds"][run - 1] for run in left}
