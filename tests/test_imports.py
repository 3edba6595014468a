"""The import-direction rule of STYLE.md: a module imports only from layers before its own."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "translator"
LAYERS = [
    {
        "translator",
        "translator.config",
        "translator.device",
        "translator.errors",
        "translator.files",
        "translator.line_warnings",
        "translator.versions",
    },
    {"translator.data"},
    {"translator.model"},
    {"translator.decode"},
    {"translator.diagnostics"},
    {"translator.checkpoint"},
    {
        "translator.prepare",
        "translator.prepared",
        "translator.translate",
        "translator.loading",
        "translator.rerank",
        "translator.stream",
        "translator.score",
        "translator.serve",
        "translator.http_api",
        "translator.summary",
        "translator.export",
        "translator.marian",
        "translator.marian_files",
        "translator.attention",
    },
    {"translator.evaluate"},
    {"translator.train"},
    {"translator.cli", "translator.__main__", "translator.recipe"},
]


def layer_of(module: str) -> int:
    for depth in range(module.count(".") + 1, 0, -1):
        prefix = ".".join(module.split(".")[:depth])
        for index, layer in enumerate(LAYERS):
            if prefix in layer:
                return index
    raise AssertionError(f"{module} is in no layer; add it to LAYERS")


def modules():
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def test_imports_point_down_the_layers():
    wrong = []
    for module, path in modules():
        own = layer_of(module)
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("translator")
            ):
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("translator")]
            for name in names[:1] if isinstance(node, ast.ImportFrom) else names:
                target = name
                if isinstance(node, ast.ImportFrom) and node.module == "translator":
                    target = f"translator.{node.names[0].name}"
                if target.split(".")[:2] == module.split(".")[:2] and own != 0:
                    continue  # inside one sub-package
                if layer_of(target) > own:
                    wrong.append(f"{module} imports {target}")
    assert not wrong, "imports against the layer order: " + "; ".join(wrong)


def test_config_imports_nothing_but_errors():
    imported = {
        node.module
        for path in (PACKAGE / "config").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    ours = {m for m in imported if m.startswith("translator")}
    assert ours, "the walk found no imports: has the config package moved?"
    assert {m for m in ours if not m.startswith("translator.config.")} == {"translator.errors"}
