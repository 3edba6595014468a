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
    {"translator.averaging"},
    # what works on prepared data and checkpoints, in the order they build on each other
    {
        "translator.prepared",
        "translator.rerank",
        "translator.http_api",
        "translator.export",
        "translator.marian_files",
    },
    {
        "translator.prepare",
        "translator.summary",
        "translator.translate",
        "translator.loading",
        "translator.marian",
        "translator.attention",
    },
    {"translator.stream"},  # translate's stdin and stdout
    {"translator.score"},  # reads as stream does
    {"translator.serve"},  # translate and score behind HTTP
    {"translator.evaluate"},
    {"translator.train"},
    {"translator.cli", "translator.__main__", "translator.recipe"},
]


def layer_of(module: str) -> int:
    # the longest listed prefix, down to translator.X: `translator` alone is the package's
    # __init__ (version only), not a layer every new module falls into
    for depth in range(module.count(".") + 1, 1 if module != "translator" else 0, -1):
        prefix = ".".join(module.split(".")[:depth])
        for index, layer in enumerate(LAYERS):
            if prefix in layer:
                return index
    raise AssertionError(f"{module} is in no layer; add it to LAYERS")


def is_module(name: str) -> bool:
    return (PACKAGE / f"{name}.py").is_file() or (PACKAGE / name / "__init__.py").is_file()


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
            if isinstance(node, ast.ImportFrom) and node.module == "translator":
                # each module named (`__version__` is the package's own)
                names = [
                    f"translator.{a.name}" if is_module(a.name) else "translator"
                    for a in node.names
                ]
            elif isinstance(node, ast.ImportFrom):
                names = names[:1]
            for target in names:
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
