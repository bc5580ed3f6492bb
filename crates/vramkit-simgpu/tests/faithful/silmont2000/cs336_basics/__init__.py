# Ours, not the assignment's: benchmark.py imports `TransformerLM`, `config`
# and `AdamW` from the author's own assignment-1 package, which is not in
# the source tree (and carries no licence). This gives it the same names over
# the staff model of the tree's cs336-basics (model.py, nn_utils.py and
# optimizer.py, unmodified).
from .model import BasicsTransformerLM
from .optimizer import AdamW

# The hyperparameters benchmark.py reads; only `theta` shapes the model.
config = {"theta": 10000.0, "lr": 6e-4, "weight_decay": 0.01, "betas": (0.9, 0.99), "eps": 1e-8}


class TransformerLM(BasicsTransformerLM):
    """benchmark.py's argument order; forward returns {"logits": ...}."""

    def __init__(self, vocab_size, d_model, num_layers, num_heads, d_ff, theta, context_length, device=None):
        super().__init__(vocab_size, context_length, d_model, num_layers, num_heads, d_ff, theta)

    def forward(self, x):
        return {"logits": super().forward(x)}
