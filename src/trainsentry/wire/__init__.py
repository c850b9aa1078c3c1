"""Wire format shared by agent and collector: canonical batch bytes, HMAC, hash chain."""

from .batch import (GENESIS_PREV, NODE_HEADER, SIGNATURE_HEADER, Batch, BatchError, digest,
                    encode_batch, new_key, parse_batch, sign, verify)

__all__ = ["GENESIS_PREV", "NODE_HEADER", "SIGNATURE_HEADER", "Batch", "BatchError", "digest",
           "encode_batch", "new_key", "parse_batch", "sign", "verify"]
