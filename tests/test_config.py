import re
from pathlib import Path

import pytest
import yaml

from translator import config
from translator.errors import TranslatorError

CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load_and_round_trip(path):
    cfg = config.load(path)
    again = config.from_dict(yaml.safe_load(config.dump(cfg)))
    assert again == cfg


def test_every_key_listed_is_one_that_set_takes_back_at_its_listed_default():
    """`translator keys` lists each field of each section once, and each listed default, given
    back through --set, leaves the default config as it was."""
    from translator.config import reference

    found = reference.sections(config.Config())
    listed = [key for _, _, keys in found for key in keys]
    fields = [
        f"{section}.{name}"
        for section, values in config.to_dict(config.Config()).items()
        for name in values
    ]
    assert [k.name for k in listed] == fields
    assert all(doc for _, doc, _ in found)
    for key in listed:
        assert key.doc and key.type, key.name
        assert config.load(None, [f"{key.name}={key.default}"]) == config.Config(), key.name
    shown = {k.name: k.type for k in listed}
    assert shown["train.lr"] == "float" and shown["model.n_kv_heads"] == "int or null"
    assert shown["data.spm_model_type"] == "one of unigram, bpe"


def test_defaults_have_docs():
    """Every field of every section (each a module of translator/config/) has a default and a doc
    line."""
    import ast

    seen = set()
    for path in Path(config.__file__).parent.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if not (isinstance(node, ast.ClassDef) and node.name.endswith("Config")):
                continue
            seen.add(node.name)
            body = node.body
            for i, stmt in enumerate(body):
                if isinstance(stmt, ast.AnnAssign):
                    assert stmt.value is not None, f"{node.name}.{stmt.target.id} has no default"
                    doc = body[i + 1] if i + 1 < len(body) else None
                    assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), (
                        f"{node.name}.{stmt.target.id} has no doc line"
                    )
    sections = {type(getattr(config.Config(), f)).__name__ for f in config.Config.__annotations__}
    assert seen == {"Config"} | sections  # the walk found every section's class


def test_overrides_are_typed(tmp_path):
    cfg = config.load(
        None,
        [
            "train.lr=5e-4",
            "model.n_kv_heads=2",
            "train.max_updates=7",
            "data.splits.test=test2016",
            "model.tie_embeddings=false",
        ],
    )
    assert cfg.train.lr == 5e-4 and isinstance(cfg.train.lr, float)
    assert cfg.model.n_kv_heads == 2 and cfg.train.max_updates == 7
    assert cfg.data.splits["test"] == "test2016" and cfg.data.splits["train"] == "train"
    assert cfg.model.tie_embeddings is False


def test_unknown_key_names_key_file_and_closest(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  learning_rate: 0.1\n")
    with pytest.raises(TranslatorError) as err:
        config.load(path)
    message = str(err.value)
    assert "train.learning_rate" in message and str(path) in message


def test_unknown_key_suggests_closest():
    with pytest.raises(TranslatorError, match="did you mean train.max_updates"):
        config.load(None, ["train.max_update=3"])


@pytest.mark.parametrize(
    "override, expected",
    [
        ("train.max_updates=abc", "expects int"),
        ("train.max_updates=true", "expects int"),
        ("train.lr=[1]", "expects float"),
        ("model.norm=middle", "not one of pre, post"),
        ("data.splits=3", "expects a mapping"),
    ],
)
def test_wrong_type_names_key_and_type(override, expected):
    with pytest.raises(TranslatorError, match=expected) as err:
        config.load(None, [override])
    assert override.split("=")[0].split(".")[-1] in str(err.value)


def test_invariants_checked():
    with pytest.raises(TranslatorError, match="divisible"):
        config.load(None, ["model.d_model=100", "model.n_heads=8"])
    with pytest.raises(TranslatorError, match="n_kv_heads"):
        config.load(None, ["model.n_kv_heads=3"])


@pytest.mark.parametrize(
    "override, where",
    [
        ("decode.beam_size=0", "decode.beam_size"),
        ("decode.max_len_a=-1", "decode.max_len_a"),
        ("decode.min_len=-2", "decode.min_len"),
        ("decode.batch_tokens=0", "decode.batch_tokens"),
        ("decode.max_len_a=.inf", "decode.max_len_a"),
        ("decode.length_penalty=.nan", "decode.length_penalty"),
        # past these the GNMT penalty overflows, or lengths outgrow the search's integers
        ("decode.length_penalty=100", "decode.length_penalty"),
        ("decode.length_penalty=-11", "decode.length_penalty"),
        ("decode.min_len=99999999999999999999", "decode.min_len"),
        ("decode.max_len_b=10000000", "decode.max_len_b"),
        ("decode.max_len_a=1e308", "decode.max_len_a"),
        ("decode.channel_weight=1e308", "decode.channel_weight"),
        ("model.n_heads=0", "model.n_heads"),
        ("model.n_heads=-8", "model.n_heads"),
        ("model.d_model=0", "model.d_model"),
        ("model.dropout=1", "model.dropout"),
        ("model.n_encoder_layers=-1", "model.n_encoder_layers"),
        ("model.max_positions=1", "model.max_positions"),
        ("train.lr=.nan", "train.lr"),
        ("train.eval_every=0", "train.eval_every"),
        ("train.grad_accum_steps=0", "train.grad_accum_steps"),
        ("train.keep_last=-1", "train.keep_last"),
        ("train.label_smoothing=1", "train.label_smoothing"),
        ("train.seed=-5", "train.seed"),  # numpy refuses seeds outside 32-bit unsigned
        ("train.seed=4294967296", "train.seed"),
        ("data.max_train_pairs=-5", "data.max_train_pairs"),
        ("data.character_coverage=0", "data.character_coverage"),
        ("data.character_coverage=0.9", "data.character_coverage"),  # SentencePiece's 0.98-1
        ("data.character_coverage=1.01", "data.character_coverage"),
        ("data.src_lang=de", "data.tgt_lang"),
    ],
)
def test_decode_values_out_of_range_are_refused(override, where):
    with pytest.raises(TranslatorError, match=where):
        config.load(None, [override])


@pytest.mark.parametrize(
    "override, where, fix",
    [
        ("data.name=", "data.name", "plain name"),  # would be data_dir itself, replaced whole
        ("data.name=..", "data.name", "plain name"),
        ("data.name=../elsewhere", "data.name", "plain name"),
        ("data.name=a/b", "data.name", "plain name"),
        ("data.splits.vaild=valid", "data.splits.vaild", "did you mean data.splits.valid"),
        ("data.splits.dev=dev", "data.splits.dev", "train, valid or test"),
        ("train.run_dir=", "train.run_dir", "name a directory"),
    ],
)
def test_bad_data_names_split_keys_and_an_empty_run_dir_are_refused(override, where, fix):
    with pytest.raises(TranslatorError) as err:
        config.load(None, [override])
    assert err.value.where == where and fix in err.value.fix


def test_a_minimum_length_above_a_fixed_limit_is_refused_and_equal_is_a_forced_length():
    with pytest.raises(TranslatorError, match="min_len=9 is above the output limit max_len_b=5"):
        config.load(None, ["decode.min_len=9", "decode.max_len_a=0", "decode.max_len_b=5"])
    config.load(None, ["decode.min_len=5", "decode.max_len_a=0", "decode.max_len_b=5"])


def test_infinity_is_refused_as_not_finite_where_a_range_has_no_upper_end():
    with pytest.raises(TranslatorError, match=r"lr=inf is out of range .*at least 0 \(finite\)"):
        config.load(None, ["train.lr=.inf"])


def test_an_output_limit_of_zero_is_refused():
    with pytest.raises(TranslatorError, match="allow no output"):
        config.load(None, ["decode.max_len_a=0", "decode.max_len_b=0"])
    assert config.load(None, ["decode.max_len_a=0", "decode.max_len_b=50"]).decode.max_len_b == 50


def test_malformed_override():
    with pytest.raises(TranslatorError, match="KEY=VALUE"):
        config.load(None, ["train.lr"])


def test_unreadable_config_text_and_override_values_are_one_line_errors(tmp_path):
    binary = tmp_path / "model.yaml"
    binary.write_bytes(b"\x80\xff")
    with pytest.raises(TranslatorError, match="not a UTF-8 text file"):
        config.load(binary)
    with pytest.raises(TranslatorError, match="not valid YAML"):
        config.load(None, ["train.lr=[1"])


def test_data_option_is_taken_literally(tmp_path):
    from translator.cli.options import load_config

    assert load_config(None, [], "corpora/wmt #2: v1").data.source == "corpora/wmt #2: v1"


def test_yaml_11_booleans_in_overrides_are_text_for_strings_and_truth_for_booleans():
    # Norwegian's code is `no`: YAML 1.1 would read it as False
    cfg = config.load(
        None, ["data.tgt_lang=no", "data.name=on", "model.gradient_checkpointing=yes"]
    )
    assert (cfg.data.tgt_lang, cfg.data.name) == ("no", "on")
    assert cfg.model.gradient_checkpointing is True
    assert (
        config.load(None, ["model.gradient_checkpointing=off"]).model.gradient_checkpointing
        is False
    )


@pytest.mark.parametrize(
    "override, said",
    [
        ("model.d_model=abc", "model.d_model expects int"),
        ("train.lrr=1", "unknown key 'train.lrr'"),
        ("traing.lr=1", "unknown key 'traing'"),
    ],
)
def test_an_override_error_names_the_override_not_the_file(override, said):
    with pytest.raises(TranslatorError, match=said) as err:
        config.load(Path(__file__).parents[1] / "configs" / "tiny.yaml", [override])
    assert err.value.where == f"--set {override}"


def test_a_key_given_twice_is_refused_naming_the_key_and_the_file(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("train:\n  lr: 0.001\n  max_updates: 5\n  lr: 0.1\n")
    with pytest.raises(TranslatorError) as err:
        config.load(path)
    assert err.value.where == str(path)
    assert "'lr' is given twice (lines 2 and 4)" in err.value.what
    override = "data.splits={train: a, train: b}"
    with pytest.raises(TranslatorError, match="'train' is given twice") as err:
        config.load(None, [override])
    assert err.value.where == f"--set {override}"
    # a merge key's values may be overridden: that is what merging is for
    merged = tmp_path / "merged.yaml"
    merged.write_text("train:\n  <<: {lr: 0.1, max_updates: 5}\n  lr: 0.002\n")
    assert config.load(merged).train.lr == 0.002


@pytest.mark.parametrize(
    "text",
    ["010", "2016", "20_16", "0x1F", "2026_12_06", "1:30", "2026-12-06", "1.50", "no", "on"],
)
def test_a_string_setting_keeps_an_unquoted_number_as_written(tmp_path, text):
    # YAML 1.1 reads these as 8, 2016, 2016, 31, 20261206, 90, a date, 1.5, False and True
    cfg = config.load(None, [f"data.name={text}", f"data.splits.test={text}"])
    assert cfg.data.name == text and cfg.data.splits["test"] == text
    path = tmp_path / "numbers.yaml"
    path.write_text(
        f"data:\n  name: {text}\n  splits: {{test: {text}}}\ntrain:\n  run_dir: {text}\n"
    )
    cfg = config.load(path)
    assert (cfg.data.name, cfg.data.splits["test"], cfg.train.run_dir) == (text, text, text)


def test_quoted_strings_lose_their_quotes_and_other_settings_keep_yaml_values(tmp_path):
    cfg = config.load(None, ["data.name='010'", 'train.run_dir="runs/a b"', "train.seed=010"])
    assert (cfg.data.name, cfg.train.run_dir, cfg.train.seed) == ("010", "runs/a b", 8)
    path = tmp_path / "typed.yaml"
    path.write_text("data: {name: '010'}\ntrain: {max_updates: 0x10, lr: 1.0e-3, compile: on}\n")
    cfg = config.load(path)
    assert cfg.data.name == "010" and cfg.train.max_updates == 16 and cfg.train.lr == 1e-3
    assert cfg.train.compile is True and type(cfg.train.max_updates) is int


def test_an_error_in_a_mapping_item_names_the_override_that_gave_it():
    tiny = Path(__file__).parents[1] / "configs" / "tiny.yaml"
    with pytest.raises(TranslatorError, match="data.splits.train expects str") as err:
        config.load(tiny, ["data.splits.train=[a]"])
    assert err.value.where == "--set data.splits.train=[a]"


def test_a_cosine_floor_above_the_peak_is_refused_and_other_schedules_ignore_it():
    with pytest.raises(TranslatorError, match="min_lr=0.01 is above lr=0.0001") as err:
        config.load(None, ["train.schedule=cosine", "train.lr=1e-4", "train.min_lr=1e-2"])
    assert err.value.where == "train.min_lr"
    config.load(None, ["train.schedule=cosine", "train.lr=1e-4", "train.min_lr=1e-4"])
    config.load(None, ["train.schedule=inverse_sqrt", "train.lr=1e-4", "train.min_lr=1e-2"])


def test_a_length_ratio_below_one_is_refused_as_it_would_drop_every_pair():
    with pytest.raises(TranslatorError, match="max_length_ratio=0.5 is below 1") as err:
        config.load(None, ["data.max_length_ratio=0.5"])
    assert err.value.where == "data.max_length_ratio"
    for ratio in ("0", "1", "1.5"):  # off; equal lengths only; a ratio
        config.load(None, [f"data.max_length_ratio={ratio}"])


def test_paths_expand_home_and_environment_variables_as_a_shell_would(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.setenv("SCRATCH", "/scratch/someone")
    cfg = config.load(
        None,
        [
            "data.data_dir=~/data",
            "data.source=$SCRATCH/corpus",
            "train.run_dir=${SCRATCH}/runs/x",
            "train.init_from=~/base.pt",
        ],
    )
    assert cfg.data.data_dir == "/home/someone/data"
    assert cfg.data.source == "/scratch/someone/corpus"
    assert cfg.train.run_dir == "/scratch/someone/runs/x"
    assert cfg.train.init_from == "/home/someone/base.pt"
    assert config.load(None, ["data.source=hf:wmt/wmt14:de-en"]).data.source == "hf:wmt/wmt14:de-en"
    monkeypatch.delenv("NOSUCH", raising=False)
    with pytest.raises(TranslatorError, match=r"names \$NOSUCH, which is not set") as err:
        config.load(None, ["train.run_dir=$NOSUCH/runs"])
    assert err.value.where == "train.run_dir"


def test_data_given_with_dash_dash_data_is_expanded_and_an_empty_one_refused(monkeypatch):
    """--data takes its text literally (not as YAML), but a path in it is expanded as data.source
    is: `--data=~/corpus` reaches us unexpanded (the shell expands ~ only at a word's start)."""
    from translator.cli.options import load_config

    monkeypatch.setenv("HOME", "/home/someone")
    assert load_config(None, [], "~/corpus").data.source == "/home/someone/corpus"
    assert load_config(None, [], "hf:wmt/wmt14:de-en").data.source == "hf:wmt/wmt14:de-en"
    for given, where, said in [
        ("", "--data", "an empty data source"),  # an unset $DATA in --data "$DATA"
        ("   ", "--data", "an empty data source"),
        ("hf:", "--data", "names no dataset"),
        ("hf::de-en", "--data", "names no dataset"),
    ]:
        with pytest.raises(TranslatorError, match=said) as err:
            load_config(None, [], given)
        assert err.value.where == where
    with pytest.raises(TranslatorError, match="an empty data source") as err:
        config.load(None, ["data.source="])
    assert err.value.where == "data.source"


@pytest.mark.parametrize(
    "overrides, said",
    [
        (["data.vocab_size=1"], "pad, unk, bos and eos take 4 pieces"),
        (["data.vocab_size=4"], "pad, unk, bos and eos take 4 pieces"),
        (["data.vocab_size=2", "data.byte_fallback=true"], "byte pieces 256 more"),
        (["data.vocab_size=260", "data.byte_fallback=true"], "byte pieces 256 more"),
    ],
)
def test_a_vocabulary_with_no_room_beside_the_special_pieces_is_refused(overrides, said):
    """SentencePiece would fail with its internal check on inserting <unk> or <s>."""
    with pytest.raises(TranslatorError) as err:
        config.load(None, overrides)
    assert err.value.where == "data.vocab_size" and said in err.value.what
    assert config.load(None, ["data.vocab_size=5"]).data.vocab_size == 5
    assert config.load(None, ["data.vocab_size=261", "data.byte_fallback=true"]).data.byte_fallback


def test_user_symbols_are_a_list_of_distinct_tags_that_count_in_the_vocabulary(tmp_path):
    assert config.load(None, ["data.user_symbols=[<BT>, '010']"]).data.user_symbols == [
        "<BT>",
        "010",
    ]
    (tmp_path / "c.yaml").write_text("data:\n  user_symbols: [<BT>, 010]\n")
    assert config.load(tmp_path / "c.yaml").data.user_symbols == ["<BT>", "010"]  # as written
    for value, said in [
        ("<BT>", "expects a list"),
        ("[<s>]", "'<s>' is a special piece"),
        ("[a b]", "'a b' holds a space"),
        ("['']", "'' is empty"),
        ("[<BT>, <BT>]", "listed twice"),
        ("[[x]]", "user_symbols[0] expects str"),
    ]:
        with pytest.raises(TranslatorError, match=re.escape(said)):
            config.load(None, [f"data.user_symbols={value}"])
    with pytest.raises(TranslatorError, match="and user_symbols 2"):
        config.load(None, ["data.vocab_size=6", "data.user_symbols=[<a>, <b>]"])
    assert config.load(None, ["data.vocab_size=7", "data.user_symbols=[<a>, <b>]"])


def test_a_stored_config_from_before_spm_normalization_loads_with_the_default():
    """A checkpoint's config written before the setting existed has no such key."""
    stored = config.to_dict(config.load(None, ["data.spm_normalization=identity"]))
    del stored["data"]["spm_normalization"]
    assert config.from_dict(stored).data.spm_normalization == "nmt_nfkc"


def test_a_stored_config_is_not_expanded_again_and_dollar_digits_are_not_names(monkeypatch):
    """A checkpoint's config holds paths as they were resolved when it was written: loading it
    elsewhere neither expands nor refuses them; `$5` in a path is not a variable."""
    monkeypatch.delenv("NOPE_VAR", raising=False)
    stored = config.to_dict(config.load(None))
    stored["train"]["run_dir"] = "runs/$NOPE_VAR"
    assert config.from_dict(stored).train.run_dir == "runs/$NOPE_VAR"
    assert config.load(None, ["data.source=/data/price$5/corpus"]).data.source == (
        "/data/price$5/corpus"
    )
