"""A quilt-style ``series`` file and the ``git format-patch`` patches it lists; ``series`` is the only source of order.
Besides DEP-3 fields, a header may say how to recognise its change upstream: ``Upstream-Check: <path>: <regex>``."""

from __future__ import annotations

import email.parser
import email.policy
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from patchset.plumbing import gitops, patchtext
from patchset.plumbing.errors import BadInput
from patchset.plumbing.ui import display_path
from patchset.series.parts import load_parts
from patchset.upstreams.pins import release_key

# DEP-3 header fields, by lower-case name. ``Bug-<Vendor>`` is matched separately.
_DEP3_NAMES = "Description Origin Bug Forwarded Author From Reviewed-by Acked-by Last-Update Applied-Upstream"
_DEP3 = {name.lower(): name for name in _DEP3_NAMES.split()}
_FIELD = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9-]*):\s*(?P<value>.*?)\s*$")
_SUBJECT_PREFIX = re.compile(r"^\[PATCH[^\]]*\]\s*")
# NNNN-<area>-<slug>.patch, lowercase a-z, 0-9 and -
PATCH_NAME = re.compile(r"^(?P<number>\d{4})-(?P<slug>[a-z0-9]+(?:-[a-z0-9]+)*)\.patch$")
_UPSTREAM_VERSION = re.compile(r"^v?(?P<version>\d+(?:\.\d+)*[0-9A-Za-z.+-]*?)(?:[,;\s]|$)")
# upstream's own commit of a backport, in full: ``Origin: backport, https://github.com/<owner>/<repo>/commit/<hash>``
_ORIGIN_COMMIT = re.compile(r"^backport,\s*\S*/commit/(?P<commit>[0-9a-f]{40})\b")
_UPSTREAM_CHECK = re.compile(r"^Upstream-Check:\s*(?P<value>.*?)\s*$", re.IGNORECASE)
_CHECK_FORM = "write it as 'Upstream-Check: <path in the tree>: <regular expression>'"


@dataclass(frozen=True)
class UpstreamCheck:
    """One ``Upstream-Check:`` of a patch header: ``pattern`` must match in the tree's file ``path``."""

    path: str
    pattern: str

    @property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.MULTILINE)

    def __str__(self) -> str:
        return f"{self.path} matches /{self.pattern}/"


@dataclass(frozen=True)
class Patch:
    """One patch of a series: its file, subject, DEP-3 fields, the paths it touches and its text."""

    name: str
    path: Path
    subject: str
    fields: dict[str, str] = field(compare=False)
    files: tuple[str, ...]
    text: str = field(repr=False, compare=False)
    upstream_checks: tuple[UpstreamCheck, ...] = field(default=(), compare=False)

    @property
    def upstream_commit(self) -> str | None:
        """Upstream's own commit of this change, in full, when the patch is its backport (``Origin:``), else None."""
        match = _ORIGIN_COMMIT.match(self.fields.get("Origin", ""))
        return match["commit"] if match else None

    @property
    def upstream_since(self) -> str | None:
        """The upstream version that has this change (``Applied-Upstream: 0.9.0, <url>``), else None."""
        match = _UPSTREAM_VERSION.match(self.fields.get("Applied-Upstream", ""))
        return match["version"] if match and release_key(match["version"])[0] else None


@dataclass(frozen=True)
class Series:
    """A series: its name (folder under the patches dir), the ``series`` file, its patches in order, and from its
    ``parts.toml`` ({patch file name: a pytest -k expression}) their teeth and choices."""

    name: str
    path: Path
    patches: tuple[Patch, ...]
    teeth: dict[str, str] = field(default_factory=dict, compare=False)
    choices: dict[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class SeriesEntry:
    """One patch line of a ``series`` file, its trailing comment, and why it is not usable (None: it is)."""

    line: int
    name: str
    comment: str = ""
    problem: str | None = None
    hint: str = ""


def subject_of(header_subject: str) -> str:
    """A patch's subject as its commit has it: the ``[PATCH n/m]`` prefix dropped, whitespace folded."""
    return _SUBJECT_PREFIX.sub("", " ".join(header_subject.split()))


def split_patch(text: str) -> tuple[str, str, str]:
    """(mail headers and their blank line, message, the rest from where ``git am`` cuts it) of a format-patch text."""
    headers, sep, rest = text.partition("\n\n")
    cuts = [found for marker in ("\n---\n", "\ndiff --git ") if (found := ("\n" + rest).find(marker)) != -1]
    if not sep or not cuts:
        raise BadInput("not a git format-patch file: no message followed by a diff")
    return headers + sep, rest[: min(cuts)], rest[min(cuts) :]


def split_comment(line: str) -> tuple[str, str]:
    """``(entry, comment)`` of one ``series`` line: ``#`` starts a comment anywhere on the line."""
    code = line.split("#", 1)[0]
    return code.strip(), line[len(code.rstrip()) :]


def parse_series(lines: list[str], folder: Path) -> list[SeriesEntry]:
    """Every entry of a ``series`` file's ``lines`` in order, each with its problem: the one reader of the format."""
    entries: list[SeriesEntry] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        name, comment = split_comment(line)
        if not name:
            continue
        problem, hint = None, ""
        relative = PurePosixPath(name)
        if len(name.split()) > 1:
            problem, hint = f"expected one patch file name, got {name!r}", " (quilt options are not supported)"
        elif relative.is_absolute() or ".." in relative.parts:
            problem = f"{name} must be a file inside {display_path(folder)}"
        elif (first := seen.get(relative.as_posix())) is not None:
            problem, hint = f"{name} is listed twice (first on line {first})", "; list each patch once"
        elif not (folder / relative).is_file():
            shown = display_path(folder / relative)
            problem, hint = f"{name} is listed but {shown} does not exist", "; add it or drop the line"
        if problem is None or "listed but" in problem:
            seen.setdefault(relative.as_posix(), number)
        entries.append(SeriesEntry(number, name, comment, problem, hint))
    return entries


def _dep3_fields(body: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in body.splitlines():
        match = _FIELD.match(line)
        if not match or not match["value"]:
            continue
        lower = match["name"].lower()
        name = _DEP3.get(lower) or (match["name"] if lower.startswith("bug-") else None)
        if name is None:
            continue
        fields[name] = f"{fields[name]}, {match['value']}" if name in fields else match["value"]
    return fields


def _upstream_checks(body: str, path: Path) -> tuple[UpstreamCheck, ...]:
    """The ``Upstream-Check:`` lines of a header body, in order; ``BadInput`` naming the patch for a bad one."""
    checks: list[UpstreamCheck] = []
    for line in body.splitlines():
        match = _UPSTREAM_CHECK.match(line)
        if not match:
            continue
        where = f"{path}: Upstream-Check: {match['value']!r}"
        rel, sep, pattern = match["value"].partition(": ")
        rel, pattern = rel.strip(), pattern.strip()
        if not sep or not rel or not pattern:
            raise BadInput(f"{where} names no file or no expression; {_CHECK_FORM}")
        relative = PurePosixPath(rel)
        if relative.is_absolute() or ".." in relative.parts:
            raise BadInput(f"{where}: {rel} must be a path inside the upstream tree; {_CHECK_FORM}")
        try:
            re.compile(pattern, re.MULTILINE)
        except re.error as exc:
            raise BadInput(f"{where}: the expression does not compile ({exc}); {_CHECK_FORM}") from None
        checks.append(UpstreamCheck(path=relative.as_posix(), pattern=pattern))
    return tuple(checks)


def read_patch(path: Path) -> Patch:
    """Parse a ``git format-patch`` file; raise ``BadInput`` when git cannot read it as a patch."""
    error = gitops.patch_parse_error(path)
    if error is not None:
        raise BadInput(f"{path} is not a valid patch ({error}); re-export it with git format-patch")
    raw = path.read_bytes()
    message = email.parser.BytesHeaderParser(policy=email.policy.default).parsebytes(raw)
    subject = subject_of(str(message.get("Subject", "")))
    text = raw.decode("utf-8", "surrogateescape")
    head, _, _ = text.partition("\ndiff --git ")
    body = head.partition("\n\n")[2].partition("\n---\n")[0]
    return Patch(
        name=path.name,
        path=path,
        subject=subject or path.name,
        fields=_dep3_fields(body),
        files=tuple(patchtext.patch_paths(text)),
        text=text,
        upstream_checks=_upstream_checks(body, path),
    )


def load_series(patches_dir: Path, name: str) -> Series:
    """Read ``PATCHES_DIR/NAME/series`` and every patch it lists, in order; ``BadInput`` at the first problem."""
    folder = patches_dir / name
    series_file = folder / "series"
    try:
        lines = series_file.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise BadInput(f"{series_file} not found; every series folder needs a series file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BadInput(f"cannot read {series_file} ({reason}); it must be a UTF-8 text file") from None
    patches: list[Patch] = []
    for entry in parse_series(lines, folder):
        if entry.problem is not None:
            raise BadInput(f"{series_file}:{entry.line}: {entry.problem}{entry.hint}")
        patches.append(read_patch(folder / PurePosixPath(entry.name)))
    teeth, choices = load_parts(folder, [patch.name for patch in patches])
    return Series(name=name, path=series_file, patches=tuple(patches), teeth=teeth, choices=choices)
