#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "engine/generate/conversation.h"
#include "engine/model/model.h"
#include "engine/util/thread_pool.h"
#include "sessions/schema.h"
#include "sessions/state_store.h"
#include "tests/support/fixtures.h"

namespace ember::sessions {
namespace {

TEST(Repro, CancelledReply) {
    EMBER_REQUIRE_FIXTURE("arch/llama/llama.gguf");
    auto model = Model::load(test::fixture_path("arch/llama/llama.gguf"));
    ThreadPool pool(2);
    std::filesystem::remove("/tmp/fkrepro/x.db");
    Database db("/tmp/fkrepro/x.db");
    migrate(db);
    StateStoreOptions so;
    StateStore store(db, model->fingerprint(), KvType::F32, so);
    ConversationOptions co;
    co.context = 2048;
    Conversation conv(*model, pool, co);
    conv.set_prefix_store(&store);
    SamplingParams sp;
    sp.temperature = 0;
    Sampler sampler(sp);
    GenerateOptions go;
    go.max_tokens = 200;
    for (int turn = 0; turn < 6; ++turn) {
        conv.add_message({"user", "Tell me a long story number " + std::to_string(turn), {}, {}});
        int n = 0;
        auto r = conv.respond(sampler, go, [&](const std::string&, TextKind) {
            return turn % 2 == 1 ? ++n < 37 : true;
        });
        std::string w = store.take_warning();
        EXPECT_EQ(w, "") << "turn " << turn;
        printf("turn %d finish %d ids %zu cached %zu\n", turn, (int)r.finish, r.ids.size(), conv.cached_tokens().size());
    }
}

}  // namespace
}  // namespace ember::sessions
