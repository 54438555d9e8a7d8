# incorrect, would be 3x
# fake-result: {"status": "incorrect", "correct": false, "speedup": 3.0}
class ModelNew:
    pass
