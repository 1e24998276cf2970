"""precision-doctor: find and fix FP16/BF16 accuracy loss, layer by layer."""

__version__ = "0.1.0"
