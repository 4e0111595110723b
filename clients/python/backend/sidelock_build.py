"""The sidelock client's PEP 517 build backend, standard library only.

pip builds the package with it and nothing else, so installing needs no
package index: ``pip install --no-index clients/python`` (or the sdist) in a
fresh virtualenv works offline. pyproject.toml names it (``backend-path``).

It builds exactly this project: the package in src/sidelock, its core
metadata from pyproject.toml's [project] table (read with tomllib, Python
3.11+, in the source tree; from PKG-INFO in an sdist, so an sdist builds on
any supported Python), and the license file. The license file is LICENSE
next to pyproject.toml, else the repository's LICENSE two levels up (the
source tree keeps one copy, at its root).
"""

from __future__ import annotations

import base64
import email.parser
import gzip
import hashlib
import io
import os
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "sidelock"
TAG = "py3-none-any"

# Hooks (PEP 517, PEP 660) ---------------------------------------------------


def get_requires_for_build_wheel(config_settings=None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings=None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings=None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings=None) -> str:
    return _write_dist_info(Path(metadata_directory))


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings=None) -> str:
    return _write_dist_info(Path(metadata_directory))


def build_wheel(wheel_directory: str, config_settings=None, metadata_directory=None) -> str:
    files = [(f"{PACKAGE}/{p.relative_to(_package_dir()).as_posix()}", p.read_bytes()) for p in _package_files()]
    return _write_wheel(Path(wheel_directory), files)


def build_editable(wheel_directory: str, config_settings=None, metadata_directory=None) -> str:
    """A wheel whose .pth puts src/ on sys.path: edits take effect at once."""
    pth = (str(ROOT / "src") + "\n").encode()
    return _write_wheel(Path(wheel_directory), [(f"_{PACKAGE}_editable.pth", pth)])


def build_sdist(sdist_directory: str, config_settings=None) -> str:
    meta = _metadata()
    base = f"{_dist_name(meta)}-{meta['Version']}"
    members: List[Tuple[str, bytes]] = [
        ("PKG-INFO", _metadata_text(meta).encode()),
        ("pyproject.toml", (ROOT / "pyproject.toml").read_bytes()),
        ("README.md", (ROOT / "README.md").read_bytes()),
        ("LICENSE", _license_file().read_bytes()),
        ("backend/sidelock_build.py", Path(__file__).read_bytes()),
    ]
    members += [(p.relative_to(ROOT).as_posix(), p.read_bytes()) for p in _package_files()]
    name = f"{base}.tar.gz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path, data in sorted(members):
            info = tarfile.TarInfo(f"{base}/{path}")
            info.size, info.mtime, info.mode = len(data), _epoch(), 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    out = Path(sdist_directory) / name

    with open(out, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=_epoch()) as gz:
        gz.write(raw.getvalue())
    return name


# Metadata ------------------------------------------------------------------

LICENSE_CLASSIFIER = "License :: OSI Approved :: Apache Software License"


def _metadata() -> Dict[str, object]:
    """Core metadata (2.1) as fields: from PKG-INFO in an sdist, else pyproject.toml."""
    pkg_info = ROOT / "PKG-INFO"
    if pkg_info.exists():
        msg = email.parser.Parser().parsestr(pkg_info.read_text(encoding="utf-8"))
        meta: Dict[str, object] = {k: msg.get_all(k) if k in _MULTI else msg[k] for k in set(msg.keys())}
        meta["Description"] = msg.get_payload()
        return meta
    try:
        import tomllib
    except ImportError as e:  # Python < 3.11 in the source tree: use the sdist or the wheel
        raise RuntimeError("building sidelock from its source tree needs Python 3.11+ (tomllib); "
                           "install the sdist or the wheel instead") from e
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    readme = project.get("readme", "README.md")
    classifiers = list(project.get("classifiers", []))
    if LICENSE_CLASSIFIER not in classifiers:
        classifiers.append(LICENSE_CLASSIFIER)
    license_ = project.get("license", "")
    return {
        "Name": project["name"],
        "Version": project["version"],
        "Summary": project.get("description", ""),
        "License": license_ if isinstance(license_, str) else license_.get("text", ""),
        "Keywords": ",".join(project.get("keywords", [])),
        "Requires-Python": project.get("requires-python"),
        "Classifier": classifiers,
        "Project-URL": [f"{k}, {v}" for k, v in project.get("urls", {}).items()],
        "Description-Content-Type": "text/markdown",
        "Description": (ROOT / readme).read_text(encoding="utf-8"),
    }


_MULTI = {"Classifier", "Project-URL"}
_ORDER = ["Name", "Version", "Summary", "License", "Keywords", "Requires-Python", "Classifier", "Project-URL",
          "Description-Content-Type"]


def _metadata_text(meta: Dict[str, object]) -> str:
    lines = ["Metadata-Version: 2.1"]
    for key in _ORDER:
        value = meta.get(key)
        for v in (value if isinstance(value, list) else [value]):
            if v:
                lines.append(f"{key}: {v}")
    return "\n".join(lines) + "\n\n" + str(meta.get("Description") or "")


def _dist_name(meta: Dict[str, object]) -> str:
    return str(meta["Name"]).lower().replace("-", "_").replace(".", "_")


def _dist_info(meta: Dict[str, object]) -> str:
    return f"{_dist_name(meta)}-{meta['Version']}.dist-info"


def _write_dist_info(directory: Path) -> str:
    meta = _metadata()
    info = directory / _dist_info(meta)
    for path, data in _dist_info_files(meta):
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return info.name


def _dist_info_files(meta: Dict[str, object]) -> List[Tuple[str, bytes]]:
    info = _dist_info(meta)
    wheel = f"Wheel-Version: 1.0\nGenerator: sidelock_build\nRoot-Is-Purelib: true\nTag: {TAG}\n"
    return [
        (f"{info}/METADATA", _metadata_text(meta).encode()),
        (f"{info}/WHEEL", wheel.encode()),
        (f"{info}/licenses/LICENSE", _license_file().read_bytes()),
    ]


# Files ---------------------------------------------------------------------


def _package_dir() -> Path:
    return ROOT / "src" / PACKAGE


def _package_files() -> List[Path]:
    return sorted(p for p in _package_dir().rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".typed"))


def _license_file() -> Path:
    for candidate in (ROOT / "LICENSE", ROOT.parent.parent / "LICENSE"):
        if candidate.is_file():
            return candidate
    raise RuntimeError(f"no LICENSE next to {ROOT / 'pyproject.toml'} or at the repository's root")


def _epoch() -> int:
    """SOURCE_DATE_EPOCH when set (reproducible builds), else now."""
    return int(os.environ.get("SOURCE_DATE_EPOCH") or time.time())


def _write_wheel(directory: Path, files: List[Tuple[str, bytes]]) -> str:
    meta = _metadata()
    name = f"{_dist_name(meta)}-{meta['Version']}-{TAG}.whl"
    entries = sorted(files) + _dist_info_files(meta)
    record_path = f"{_dist_info(meta)}/RECORD"
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in entries] + [f"{record_path},,"]
    entries.append((record_path, ("\n".join(record) + "\n").encode()))
    stamp = time.gmtime(max(_epoch(), 315532800))[:6]  # zip cannot say before 1980
    with zipfile.ZipFile(directory / name, "w", compression=zipfile.ZIP_DEFLATED) as whl:
        for path, data in entries:
            info = zipfile.ZipInfo(path, date_time=stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
    return name


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main(argv: Optional[List[str]] = None) -> None:
    """python3 backend/sidelock_build.py OUTDIR: the sdist and the wheel
    into OUTDIR (make release); pip uses the hooks above."""
    import sys
    out = Path((argv or sys.argv[1:] or ["dist"])[0])
    out.mkdir(parents=True, exist_ok=True)
    for built in (build_sdist(str(out)), build_wheel(str(out))):
        print(out / built)


if __name__ == "__main__":
    main()
