"""The import-direction rule (README, Development): a module imports only from layers before its
own."""

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
        "translator.input_lines",
        "translator.line_warnings",
        "translator.other_models",
        "translator.scripts",
        "translator.versions",
    },
    {"translator.bleu"},  # sacreBLEU and chrF: eval and validation score with it
    {"translator.data"},
    {"translator.model"},
    {"translator.decode"},
    {"translator.diagnostics"},
    {"translator.checkpoint"},
    {"translator.averaging"},
    # what works on prepared data and checkpoints, in the order they build on each other
    {
        "translator.prepared_files",
        "translator.prepared",
        "translator.prepare_record",
        "translator.rerank",
        "translator.terminology",
        "translator.guided",
        "translator.line_pieces",
        "translator.search_warnings",
        "translator.http_request",
        "translator.http_api",
        "translator.export",
        "translator.marian_files",
        "translator.fairseq_layers",
        "translator.fairseq_files",
        "translator.fairseq_settings",
    },
    {"translator.console"},  # stderr: bars, warnings, log lines
    {"translator.vocab_source"},  # the SentencePiece model(s) prepare does not train
    {
        "translator.prepare",
        "translator.summary",
        "translator.translate",
        "translator.loading",
        "translator.marian",
        "translator.fairseq",
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


def test_imports_are_absolute():
    """The layer test reads absolute names only: `from ..train import x` would pass it unseen."""
    relative = [
        f"{module} (from {'.' * node.level}{node.module or ''} import ...)"
        for module, path in modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level
    ]
    assert not relative, "relative imports (write them as translator.X): " + "; ".join(relative)


def test_config_imports_nothing_but_errors():
    """The config tree is the lowest layer's own bottom: it may import translator.errors alone
    (any module may load a config; a config importing more would pull that into every one)."""
    imported = {
        (path.name, node.module)
        for path in (PACKAGE / "config").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    ours = {(name, m) for name, m in imported if m.startswith("translator")}
    assert ours, "the walk found no imports: has the config package moved?"
    others = sorted(
        f"translator/config/{name} imports {m}"
        for name, m in ours
        if not m.startswith("translator.config.") and m != "translator.errors"
    )
    assert not others, "the config package may import only translator.errors: " + "; ".join(others)
    assert "translator.errors" in {m for _, m in ours}
