"""How a fallback set becomes something runnable: emulated rounding or a real mixed-precision graph."""
