# hack, would be 5x
# fake-result: {"status": "hack", "hack": {"detected": true, "reasons": ["static:try_except_fallback"]}, "speedup": 5.0}
class ModelNew:
    pass
