"""The SDK's public surface is declared and documented: every public module of the `astrabox`
package has `__all__`, and every name in it, with the public methods and properties of its
classes, has a docstring (read from the source, so an inherited or generated one does not count)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import astrabox

PACKAGE = Path(astrabox.__file__).parent
PUBLIC_MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_"))


def _documented(node: ast.AST, body: list[ast.stmt], index: int) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return ast.get_docstring(node) is not None
    following = body[index + 1] if index + 1 < len(body) else None  # an attribute docstring
    return (
        isinstance(following, ast.Expr)
        and isinstance(following.value, ast.Constant)
        and isinstance(following.value.value, str)
    )


def _defined(body: list[ast.stmt]) -> dict[str, tuple[ast.AST, bool]]:
    """The names a module (or class) body defines: their node and whether it is documented."""
    names: dict[str, tuple[ast.AST, bool]] = {}
    for index, node in enumerate(body):
        targets: list[str] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            targets = [node.name]
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        for name in targets:
            names[name] = (node, _documented(node, body, index))
    return names


def _undocumented(module_name: str, name: str) -> list[str]:
    module = importlib.import_module(f"astrabox.{module_name}")
    origin = getattr(module, name).__module__ if hasattr(getattr(module, name), "__module__") else module.__name__
    if not origin.startswith("astrabox.") or isinstance(getattr(module, name), str | int | frozenset):
        origin = module.__name__
    tree = ast.parse(Path(importlib.import_module(origin).__file__ or "").read_text())
    defined = _defined(tree.body)
    if name not in defined:
        return [f"{origin}.{name} (not found)"]
    node, documented = defined[name]
    missing = [] if documented else [f"{origin}.{name}"]
    if isinstance(node, ast.ClassDef):
        for member, (inner, inner_documented) in _defined(node.body).items():
            is_method = isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_method and not member.startswith("_") and not inner_documented:
                missing.append(f"{origin}.{name}.{member}")
    return missing


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_module_declares_and_documents_its_names(module_name: str) -> None:
    module = importlib.import_module(f"astrabox.{module_name}")
    assert module.__doc__, f"astrabox.{module_name} has no docstring"
    exported = getattr(module, "__all__", None)
    assert exported, f"astrabox.{module_name} has no __all__"
    assert [n for n in exported if not hasattr(module, n)] == []
    assert [m for name in exported for m in _undocumented(module_name, name)] == []


def test_the_package_names_its_main_types_and_loads_them_only_when_used() -> None:
    from astrabox.client import AstraBoxClient
    from astrabox.messages import AssistantMessage
    from astrabox.sessions import SessionHandle

    assert (astrabox.AstraBoxClient, astrabox.SessionHandle, astrabox.AssistantMessage) == (
        AstraBoxClient,
        SessionHandle,
        AssistantMessage,
    )
    assert [name for name in astrabox.__all__ if getattr(astrabox, name, None) is None] == []
    with pytest.raises(AttributeError):
        astrabox.NoSuchThing  # noqa: B018
    # `astrabox` (which `astrabox.cli` and the generated code are imported through) loads no gRPC by itself.
    probe = "import sys, astrabox; print('grpc' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "False\n"
