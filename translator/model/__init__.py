"""The encoder-decoder Transformer.

Shape legend used in every comment of this package:
    B batch (sentences)      N decoder rows (B, or B*beam in beam search)
    S source length          T target length (queries)     L key length
    D d_model                H query heads                 G key/value heads (GQA; G divides H)
    K d_head = D / H         V vocabulary size             F d_ff
"""
