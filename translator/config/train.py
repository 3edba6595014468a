"""The train section: optimisation, schedule, logging and where a run's files go."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from translator.config.checks import check_range
from translator.errors import TranslatorError

# sacreBLEU's BLEU tokenizers that need no download (spm and the flores ones fetch a model);
# empty: the target language's, as `sacrebleu -l` picks it
BleuTokenizer = Literal["", "13a", "intl", "char", "zh", "ja-mecab", "ko-mecab", "none"]


@dataclass(kw_only=True)
class TrainConfig:
    run_dir: str = "runs/multi30k"
    """Where checkpoints, logs, TensorBoard events and the resolved config go."""
    seed: int = 1
    """Seed for parameters, dropout and batch order (0 to 2**32 - 1)."""
    init_from: str = ""
    """Fine-tune: start from this checkpoint's weights (ours, or one from `import-hf` or
    `import-fairseq`), its architecture (which overrides the model section but for the three
    dropouts and gradient_checkpointing) and its SentencePiece model(s) (prepare encodes the
    data with them; data.joint_vocab follows them, data.vocab_size is not read), with a fresh
    optimizer, schedule and update counter. Ignored when run_dir/last.pt exists: the run resumes.
    Empty = random weights."""
    device: str = "auto"
    """`auto` (CUDA when present), `cpu`, `cuda` or `cuda:N` (under torchrun each process takes
    its LOCAL_RANK's GPU)."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """Autocast dtype: auto = bf16 on CUDA that supports it, fp16 on older CUDA; on CPU bf16 where
    it is native (AVX512-BF16, AMX, Arm BF16), else fp32."""
    max_tokens: int = 4096
    """Tokens per batch and side, padding included (rows x the longer side's length + 1), per
    process: under torchrun an update holds about max_tokens x grad_accum_steps x processes;
    the learning rate is not scaled with it."""
    grad_accum_steps: int = 1
    """Batches accumulated into one update."""
    max_updates: int = 100_000
    """Stop after this many updates."""
    max_epochs: int = 0
    """Stop after this many epochs (0 = no limit)."""
    max_minutes: float = 0.0
    """Stop (validating and saving) after this many minutes of wall-clock training, validations
    and saves included, summed over the run's sessions: a resume continues the budget (0 = no
    limit)."""
    compile: bool = False
    """Run the training forward/backward through `torch.compile` (validation and decoding stay
    eager)."""
    lr: float = 7e-4
    """Peak learning rate."""
    warmup_steps: int = 4000
    """Linear warm-up updates before the schedule decays."""
    schedule: Literal["inverse_sqrt", "cosine", "constant"] = "inverse_sqrt"
    """Learning-rate decay after warm-up. cosine reaches min_lr at max_updates or, with
    max_minutes, when the run's minutes run out (whichever comes first); constant keeps lr
    (with ema_decay, the moving average does the annealing)."""
    min_lr: float = 0.0
    """Floor of the cosine schedule (read by no other schedule; it does not stop training)."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.98
    """AdamW beta2."""
    adam_eps: float = 1e-9
    """AdamW epsilon."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay, on linear layers' matrices only (not LayerNorm, biases,
    embeddings)."""
    label_smoothing: float = 0.1
    """Label smoothing of the cross-entropy loss."""
    subword_alpha: float = 0.0
    """Subword regularisation: each epoch segments the training pairs anew by SentencePiece
    sampling with this alpha (unigram: sharpness of the sampling, smaller = more varied and
    longer, e.g. 0.3-0.5; BPE: merge-dropout probability, e.g. 0.1). Costs a few seconds per
    epoch per 30k pairs, and holds the training text in memory: meant for small corpora. 0 = off,
    the prepared segmentation throughout."""
    clip_grad_norm: float = 0.0
    """Clip the gradient norm to this value (0 = off)."""
    log_every: int = 100
    """Updates between training-log lines and TensorBoard points."""
    eval_every: int = 1000
    """Updates between validations (loss and BLEU) and checkpoints."""
    save_every: int = 0
    """Updates between saves of last.pt alone, without a validation (fairseq's
    --save-interval-updates, Marian's --save-freq): a run killed without warning (a preempted
    machine, an out-of-memory kill) resumes from at most this many updates back. Each save
    writes the optimizer state too. 0 = at validations only (and on Ctrl-C or SIGTERM)."""
    valid_bleu_sentences: int = 0
    """Decode the first this many valid sentences for BLEU at each validation (0 = all); the
    valid loss is over all of them."""
    valid_beam_size: int = 0
    """Beam width of the validation BLEU decode (0 = decode.beam_size, 1 = greedy)."""
    valid_bleu_tokenize: BleuTokenizer = ""
    """sacreBLEU's tokenizer for validation BLEU (empty = by data.tgt_lang, as `sacrebleu -l`:
    zh, ja-mecab, ko-mecab, else 13a). Thai, Lao, Burmese or Khmer targets need `char` set here
    (13a would not split them; training warns)."""
    keep_last: int = 3
    """Numbered checkpoints (step-N.pt, written at each validation) kept besides `last.pt` and
    `best.pt` (the highest validation BLEU); `average --last N` needs N of them."""
    ema_decay: float = 0.0
    """Decode with an exponential moving average of the weights, updated after every update:
    ema = decay * ema + (1 - decay) * weights (e.g. 0.999 averages over roughly the last 1,000
    updates; fairseq's --ema-decay, Marian's --exponential-smoothing). Validation, best.pt and
    the numbered checkpoints hold the average (what eval, translate and average read); training
    continues from the raw weights, kept beside it. 0 = off."""
    patience: int = 0
    """Stop after this many validations without a better BLEU (0 = never)."""

    def __post_init__(self) -> None:
        if not self.run_dir.strip():  # the current directory would take checkpoints and logs
            raise TranslatorError(
                "run_dir is empty", "train.run_dir", "name a directory, e.g. runs/my-run"
            )
        check_range(
            "train", self, "max_tokens grad_accum_steps max_updates log_every eval_every", 1
        )
        check_range(
            "train",
            self,
            "max_epochs max_minutes lr warmup_steps min_lr adam_eps weight_decay subword_alpha "
            "clip_grad_norm save_every valid_bleu_sentences valid_beam_size keep_last patience",
            0,
        )
        check_range(
            "train", self, "adam_beta1 adam_beta2 label_smoothing ema_decay", 0, 1, high_open=True
        )
        check_range("train", self, "seed", 0, 2**32 - 1)  # numpy's seeds are 32-bit unsigned
        # only the cosine schedule reads min_lr; above lr, its "decay" would climb to min_lr
        if self.schedule == "cosine" and self.min_lr > self.lr:
            raise TranslatorError(
                f"min_lr={self.min_lr} is above lr={self.lr}: the cosine schedule would raise the "
                "learning rate",
                "train.min_lr",
                "use a min_lr of at most lr (the peak), e.g. lr / 100",
            )
