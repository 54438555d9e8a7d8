// spm.cc: the C interface of spm.h over sentencepiece::SentencePieceProcessor.
// Errors from the library come back as util::Status and are turned into
// dk_fail messages that name the model file; no C++ exception or status
// object crosses into C.
#include "data/spm.h"

#include <sentencepiece_processor.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "common/util.h"
}

struct spm_tokenizer {
    std::string path;
    sentencepiece::SentencePieceProcessor proc;
};

extern "C" dk_status spm_load(const char *path, spm_tokenizer **out) {
    *out = nullptr;
    FILE *f = std::fopen(path, "rb");
    if (!f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open: %s", path, std::strerror(errno));
    std::fclose(f);
    spm_tokenizer *s = new spm_tokenizer;
    s->path = path;
    auto st = s->proc.Load(path);
    if (!st.ok()) {
        dk_status r = dk_fail(DK_ERR_RUNTIME, "%s: not a sentencepiece model: %s", path, st.ToString().c_str());
        delete s;
        return r;
    }
    *out = s;
    return DK_OK;
}

extern "C" void spm_free(spm_tokenizer *s) { delete s; }

extern "C" dk_status spm_encode(const spm_tokenizer *s, const char *text, size_t len, int32_t **ids, int *n) {
    std::vector<int> v;
    auto st = s->proc.Encode(std::string_view(text, len), &v);
    if (!st.ok()) return dk_fail(DK_ERR_RUNTIME, "tokenizer %s: encode failed: %s", s->path.c_str(), st.ToString().c_str());
    int32_t *o = static_cast<int32_t *>(dk_malloc((v.size() ? v.size() : 1) * sizeof(int32_t)));
    for (size_t i = 0; i < v.size(); i++) o[i] = v[i];
    *ids = o;
    *n = static_cast<int>(v.size());
    return DK_OK;
}

extern "C" dk_status spm_decode(const spm_tokenizer *s, const int32_t *ids, int n, int skip_special, char **text,
                                size_t *len) {
    std::vector<int> v;
    v.reserve(n);
    int size = s->proc.GetPieceSize();
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= size)
            return dk_fail(DK_ERR_RUNTIME, "tokenizer %s: cannot decode id %d at position %d (vocabulary of %d)",
                           s->path.c_str(), ids[i], i, size);
        if (skip_special && s->proc.IsControl(ids[i])) continue;
        v.push_back(ids[i]);
    }
    std::string out;
    auto st = s->proc.Decode(v, &out);
    if (!st.ok()) return dk_fail(DK_ERR_RUNTIME, "tokenizer %s: decode failed: %s", s->path.c_str(), st.ToString().c_str());
    char *o = static_cast<char *>(dk_malloc(out.size() + 1));
    std::memcpy(o, out.data(), out.size());
    o[out.size()] = '\0';
    *text = o;
    if (len) *len = out.size();
    return DK_OK;
}

extern "C" int spm_vocab_size(const spm_tokenizer *s) { return s->proc.GetPieceSize(); }

extern "C" int spm_token_id(const spm_tokenizer *s, const char *piece) {
    // PieceToId answers the unknown id for an unknown piece: check it back.
    int id = s->proc.PieceToId(piece);
    return id >= 0 && s->proc.IdToPiece(id) == piece ? id : -1;
}

extern "C" const char *spm_token_str(const spm_tokenizer *s, int id) {
    if (id < 0 || id >= s->proc.GetPieceSize()) return nullptr;
    return s->proc.IdToPiece(id).c_str();
}

extern "C" int spm_is_special(const spm_tokenizer *s, int id) {
    return id >= 0 && id < s->proc.GetPieceSize() && s->proc.IsControl(id);
}
