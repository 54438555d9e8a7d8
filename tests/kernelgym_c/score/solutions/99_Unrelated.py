# no such task
# fake-result: {"speedup": 9.0}
class ModelNew:
    pass
