// Which model stored state belongs to, on real model files and a real database: state saved
// for a model restores for the same file copied elsewhere (hashed once more, then matching),
// and is refused after one tensor byte changes (which the sampled fingerprint misses), after
// the tokenizer or template metadata changes, and for another model of the same shape. The
// full hash is cached by file identity, so a file is read in full once.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "sessions/model_identity.h"
#include "sessions/schema.h"
#include "sessions/state_store.h"
#include "tests/support/fixtures.h"
#include "tests/support/temp_dir.h"

namespace ember::sessions {
namespace {

namespace fs = std::filesystem;

const char* const kModel = "arch/llama/llama.gguf";

using TempDir = ::ember::test::TempDir;

std::vector<int32_t> prompt_tokens() {
    std::vector<int32_t> t(150);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(100 + i * 13 % 900);
    return t;
}

// A state of `model`'s shape holding `tokens` (recognisable rows; the store does not care
// what produced them).
std::unique_ptr<InferenceState> filled_state(const Model& model, std::span<const int32_t> tokens) {
    auto st = make_state(model.config(), 1024);
    KvCache& kv = st->kv;
    kv.reserve(static_cast<int64_t>(tokens.size()));
    for (int64_t l = 0; l < kv.n_layer(); ++l) {
        for (int64_t pos = 0; pos < static_cast<int64_t>(tokens.size()); ++pos) {
            for (int64_t i = 0; i < kv.k_width(); ++i) kv.k_row(l, pos)[i] = float(pos + l + i);
            for (int64_t i = 0; i < kv.v_width(); ++i) kv.v_row(l, pos)[i] = float(pos - l - i);
        }
    }
    kv.set_length(static_cast<int64_t>(tokens.size()));
    return st;
}

// How many tokens of the saved prompt a store for the model at `path` restores.
int64_t restored_for(Database& db, const std::string& path) {
    auto model = Model::load(path);
    StateStore store(db, *model, KvType::F32);
    auto st = make_state(model->config(), 1024);
    return store.restore(prompt_tokens(), 0, *st);
}

// Rewrites `from` into `to` with every metadata value and tensor, letting `edit` change them.
void rewrite(const std::string& from, const std::string& to,
             const std::function<void(GgufWriter&, const GgufFile&)>& edit_metadata,
             const std::function<void(const GgufTensorInfo&, std::vector<uint8_t>&)>& edit_tensor) {
    auto file = GgufFile::open(from);
    GgufWriter w;
    for (const auto& key : file->metadata_order()) {
        if (key != "general.alignment") w.copy_from(*file, key);
    }
    edit_metadata(w, *file);
    for (const auto& t : file->tensors()) {
        std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
        edit_tensor(t, bytes);
        w.add_tensor(t.name, t.dims, t.type, std::move(bytes));
    }
    w.write(to, file->alignment());
}

TEST(ModelIdentity, CopiesRestoreAndEveryChangeIsRefused) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    Database db(dir.file("identity.db"));
    migrate(db);
    const std::string original = dir.file("original.gguf");
    fs::copy_file(test::fixture_path(kModel), original);
    {
        auto model = Model::load(original);
        StateStore store(db, *model, KvType::F32);
        store.save(prompt_tokens(), *filled_state(*model, prompt_tokens()));
        ASSERT_EQ(store.take_warning(), "");
    }
    auto hashed_files = [&] {
        auto s = db.prepare("SELECT COUNT(*) FROM model_file_hashes");
        s.step();
        return s.column_int(0);
    };
    EXPECT_EQ(hashed_files(), 1);
    EXPECT_EQ(restored_for(db, original), 150);
    EXPECT_EQ(hashed_files(), 1) << "the same file is hashed once, then found by its identity";

    // A copy elsewhere: another inode, hashed once more, and the same content.
    const std::string copy = dir.file("elsewhere/copy.gguf");
    fs::create_directories(fs::path(copy).parent_path());
    fs::copy_file(original, copy);
    EXPECT_EQ(restored_for(db, copy), 150);
    EXPECT_EQ(hashed_files(), 2);

    // One tensor byte, where the sampled fingerprint does not look.
    const std::string one_byte = dir.file("one_byte.gguf");
    fs::copy_file(original, one_byte);
    {
        auto file = GgufFile::open(one_byte);
        const GgufTensorInfo* embd = file->find_tensor("token_embd.weight");
        ASSERT_NE(embd, nullptr);
        ASSERT_GT(embd->n_bytes, 17u * 8192 + 4096) << "the byte must fall between the samples";
        const auto offset = static_cast<std::streamoff>(embd->data - file->file_data()) + 6000;
        std::fstream f(one_byte, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(offset);
        char byte = 0;
        f.read(&byte, 1);
        byte = static_cast<char>(byte ^ 0x01);
        f.seekp(offset);
        f.write(&byte, 1);
    }
    EXPECT_EQ(Model::load(one_byte)->fingerprint(), Model::load(original)->fingerprint())
        << "the sampled fingerprint misses this change; the full hash must not";
    EXPECT_EQ(restored_for(db, one_byte), 0);

    // Tokenizer metadata, and the chat template.
    const auto same_tensors = [](const GgufTensorInfo&, std::vector<uint8_t>&) {};
    const std::string tokenizer = dir.file("tokenizer.gguf");
    rewrite(
        original, tokenizer,
        [](GgufWriter& w, const GgufFile& f) {
            const bool add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
            w.set_bool("tokenizer.ggml.add_bos_token", !add_bos);
        },
        same_tensors);
    EXPECT_EQ(restored_for(db, tokenizer), 0);
    const std::string templ = dir.file("template.gguf");
    rewrite(
        original, templ,
        [](GgufWriter& w, const GgufFile& f) {
            w.set_string("tokenizer.chat_template",
                         f.get_string("tokenizer.chat_template").value_or("") + " ");
        },
        same_tensors);
    EXPECT_EQ(restored_for(db, templ), 0);

    // Another model of the same shape: every weight different.
    const std::string other = dir.file("other.gguf");
    rewrite(
        original, other, [](GgufWriter&, const GgufFile&) {},
        [](const GgufTensorInfo& t, std::vector<uint8_t>& bytes) {
            // BF16/F16 weights: flip a low mantissa bit of every element; F32: of every word.
            const size_t step = t.type == TensorType::F32 ? 4 : 2;
            for (size_t i = 0; i < bytes.size(); i += step) bytes[i] ^= 0x01;
        });
    EXPECT_EQ(restored_for(db, other), 0);
    // The original still restores after all that.
    EXPECT_EQ(restored_for(db, original), 150);
}

// State stored under one kind of activations (8-bit, 16-bit, exact) resumes only a model loaded
// with the same kind: their K/V rows differ for the same tokens.
TEST(ModelIdentity, ActivationsAreAPartOfTheStateIdentity) {
    EMBER_REQUIRE_FIXTURE(kModel);
    const std::string path = test::fixture_path(kModel);
    const ActivationChoice kinds[] = {ActivationChoice::Quantized, ActivationChoice::Wide,
                                      ActivationChoice::Exact};
    for (ActivationChoice saved : kinds) {
        TempDir dir;
        Database db(dir.file("identity.db"));
        migrate(db);
        {
            LoadOptions options;
            options.activations = saved;
            auto model = Model::load(path, options);
            StateStore store(db, *model, KvType::F32);
            store.save(prompt_tokens(), *filled_state(*model, prompt_tokens()));
            ASSERT_EQ(store.take_warning(), "");
        }
        for (ActivationChoice loaded : kinds) {
            LoadOptions options;
            options.activations = loaded;
            auto model = Model::load(path, options);
            StateStore store(db, *model, KvType::F32);
            auto st = make_state(model->config(), 1024);
            EXPECT_EQ(store.restore(prompt_tokens(), 0, *st), saved == loaded ? 150 : 0)
                << "saved under " << static_cast<int>(saved) << ", loaded with "
                << static_cast<int>(loaded);
        }
    }
}

TEST(ModelIdentity, ContentHashAndFileIdentity) {
    TempDir dir;
    const std::string path = dir.file("f.bin");
    {
        std::ofstream out(path, std::ios::binary);
        out << "hello";
    }
    const auto id = file_identity(path);
    ASSERT_TRUE(id);
    EXPECT_EQ(id->size, 5u);
    EXPECT_FALSE(file_identity(dir.file("missing")));
    const uint8_t a[] = {1, 2, 3};
    const uint8_t b[] = {1, 2, 4};
    EXPECT_EQ(content_hash(a).size(), 32u);
    EXPECT_NE(content_hash(a), content_hash(b));
    EXPECT_EQ(content_hash(a), content_hash(std::span<const uint8_t>(a)));
}

}  // namespace
}  // namespace ember::sessions
