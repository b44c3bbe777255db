// The chat controller behind line mode and curses, on a real (tiny) model: slash command
// parsing, /set validation, what is committed to the session store and under which parent,
// cancellation keeping the partial reply; and line mode's multi-line input assembly.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/model/model.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/support/temp_dir.h"
#include "ui/chat/chat_controller.h"
#include "ui/chat/session_backend.h"
#include "ui/line/line_mode.h"

namespace ember::test {
namespace {

using ui::ChatController;
using ui::ChatOutcome;

const char* const kModel = "arch/llama/llama.gguf";

// Remembers every commit, to check parents and branches.
class RecordingBackend final : public ui::SessionBackend {
public:
    struct Commit {
        ChatMessage message;
        int64_t parent = 0;
        int64_t id = 0;
        bool with_turn = false;
        ui::MessageNotes notes;
    };
    std::vector<Commit> commits;
    std::vector<ui::ChatSettings> settings;  // every record_settings(), in order
    int new_sessions = 0;
    std::string system_prompt;
    std::optional<ui::LoadedSession> stored;

    void new_session(const std::string& system) override {
        ++new_sessions;
        system_prompt = system;
    }
    std::string current_id() const override { return "s1"; }
    using ui::SessionBackend::commit;
    int64_t commit(const ChatMessage& message, int64_t parent_id, const TurnResult* turn,
                   const ui::MessageNotes& notes) override {
        const int64_t id = static_cast<int64_t>(commits.size()) + 100;
        commits.push_back({message, parent_id, id, turn != nullptr, notes});
        return id;
    }
    void record_settings(const ui::ChatSettings& s) override { settings.push_back(s); }
    void set_system_prompt(const std::string& text) override { system_prompt = text; }
    void rename(const std::string&) override {}
    std::vector<ui::SessionSummary> list(int64_t) override { return {}; }
    std::optional<ui::LoadedSession> load(const std::string& id) override {
        if (stored && stored->summary.id == id) return stored;
        return std::nullopt;
    }
    void export_markdown(const std::string&) override {}
    std::string stats_text() override { return "recording backend"; }
};

class ChatControllerTest : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_FIXTURE(kModel);
        model_ = Model::load(fixture_path(kModel));
        pool_ = std::make_unique<ThreadPool>(2);
        make_controller(512);
    }

    void make_controller(int64_t context) {
        controller_.reset();
        ConversationOptions options;
        options.context = context;
        conversation_ = std::make_unique<Conversation>(*model_, *pool_, options);
        SamplingParams params;
        params.temperature = 0;  // greedy: the same reply every time
        sampler_ = std::make_unique<Sampler>(params);
        GenerateOptions generation;
        generation.max_tokens = 8;
        generation.ignore_eos = true;
        engine_ = std::make_unique<ui::LocalChatEngine>(*conversation_);
        controller_ = std::make_unique<ChatController>(*engine_, *sampler_, backend_, generation);
    }

    ChatOutcome command(const std::string& line) {
        return controller_->handle_command(line, nullptr);
    }

    std::vector<std::string> roles() const {
        std::vector<std::string> out;
        for (const auto& m : conversation_->messages()) out.push_back(m.role);
        return out;
    }

    std::unique_ptr<Model> model_;
    std::unique_ptr<ThreadPool> pool_;
    std::unique_ptr<Conversation> conversation_;
    std::unique_ptr<ui::LocalChatEngine> engine_;
    std::unique_ptr<Sampler> sampler_;
    RecordingBackend backend_;
    std::unique_ptr<ChatController> controller_;
};

TEST(ChatControllerParsing, TellsCommandsFromPrompts) {
    EXPECT_TRUE(ChatController::is_command("/help"));
    EXPECT_TRUE(ChatController::is_command("/set temp 0.5"));
    EXPECT_TRUE(ChatController::is_command("/"));
    EXPECT_FALSE(ChatController::is_command("hello /help"));
    EXPECT_FALSE(ChatController::is_command(""));
    EXPECT_FALSE(ChatController::is_command(" /help"));
    // "//" escapes a prompt that starts with a slash.
    EXPECT_FALSE(ChatController::is_command("//usr/bin is a directory"));
}

TEST_F(ChatControllerTest, UnknownCommandIsExplainedAndChangesNothing) {
    const ChatOutcome outcome = command("/frobnicate now");
    EXPECT_TRUE(outcome.error);
    EXPECT_FALSE(outcome.quit);
    EXPECT_NE(outcome.message.find("/frobnicate"), std::string::npos) << outcome.message;
    EXPECT_NE(outcome.message.find("/help"), std::string::npos) << outcome.message;
    EXPECT_TRUE(conversation_->messages().empty());
    EXPECT_TRUE(backend_.commits.empty());
}

TEST_F(ChatControllerTest, HelpQuitAndArgumentChecks) {
    const ChatOutcome help = command("/help");
    EXPECT_FALSE(help.error);
    for (const char* name : {"/new", "/regen", "/edit", "/system", "/set", "/stats", "/sessions",
                             "/load", "/rename", "/export", "/quit"}) {
        EXPECT_NE(help.message.find(name), std::string::npos) << name;
    }
    EXPECT_TRUE(command("/quit").quit);
    EXPECT_TRUE(command("  /quit  ").quit);
    EXPECT_TRUE(command("/edit").error);
    EXPECT_TRUE(command("/load").error);
    EXPECT_TRUE(command("/rename").error);
    EXPECT_TRUE(command("/export").error);
    const ChatOutcome missing = command("/load nope");
    EXPECT_TRUE(missing.error);
    EXPECT_NE(missing.message.find("nope"), std::string::npos) << missing.message;
    EXPECT_TRUE(command("/regen").error) << "nothing to regenerate yet";
}

TEST_F(ChatControllerTest, SetAcceptsValidValues) {
    EXPECT_FALSE(command("/set temp 0.5").error);
    EXPECT_FLOAT_EQ(sampler_->params().temperature, 0.5f);
    EXPECT_FALSE(command("/set top_k 7").error);  // underscores work too
    EXPECT_EQ(sampler_->params().top_k, 7);
    EXPECT_FALSE(command("/set top-p 0.9").error);
    EXPECT_FLOAT_EQ(sampler_->params().top_p, 0.9f);
    EXPECT_FALSE(command("/set min-p 0").error);
    EXPECT_FLOAT_EQ(sampler_->params().min_p, 0.0f);
    EXPECT_FALSE(command("/set repeat-penalty 1.1").error);
    EXPECT_FLOAT_EQ(sampler_->params().repeat_penalty, 1.1f);
    EXPECT_FALSE(command("/set seed 42").error);
    EXPECT_EQ(sampler_->params().seed, 42u);
    EXPECT_FALSE(command("/set n-predict 5").error);
    EXPECT_EQ(controller_->generation().max_tokens, 5);
    EXPECT_FALSE(command("/set -n -1").error);
    EXPECT_EQ(controller_->generation().max_tokens, -1);
    EXPECT_FALSE(command("/set ignore-eos off").error);
    EXPECT_FALSE(controller_->generation().ignore_eos);

    EXPECT_FALSE(command("/set think off").error);
    EXPECT_EQ(conversation_->options().max_thinking_tokens, 0);
    EXPECT_EQ(conversation_->options().template_vars["enable_thinking"], false);
    EXPECT_FALSE(command("/set thinking-budget 100").error);
    EXPECT_EQ(conversation_->options().max_thinking_tokens, 100);
    EXPECT_FALSE(command("/set think on").error);
    EXPECT_EQ(conversation_->options().max_thinking_tokens, 100);
    EXPECT_FALSE(command("/set ctx 256").error);
    EXPECT_EQ(conversation_->options().context, 256);
    EXPECT_FALSE(command("/set ctx 512").error);

    const ChatOutcome listing = command("/set");
    EXPECT_FALSE(listing.error);
    EXPECT_NE(listing.message.find("temp 0.5"), std::string::npos) << listing.message;
    EXPECT_NE(listing.message.find("ctx 512"), std::string::npos) << listing.message;
}

TEST_F(ChatControllerTest, SetRejectsBadValuesAndSaysWhy) {
    const SamplingParams before = sampler_->params();
    struct Case {
        const char* line;
        const char* says;
    };
    const Case cases[] = {
        // The words the command line and the server use (engine/sampling/sampling_ranges.h).
        {"/set temp -1", "/set temp -1: must be a number between 0 and 2"},
        {"/set temp 5", "/set temp 5: must be a number between 0 and 2"},
        {"/set temp abc", "not a number"},
        {"/set temp 0.5x", "not a number"},
        {"/set temp nan", "must be a number between 0 and 2"},
        {"/set top-k 3.5", "not a whole number"},
        {"/set top-k -2", "must be a whole number between 0 and 1048576"},
        {"/set top-p 1.5", "must be a number more than 0 and at most 1"},
        {"/set top-p 0", "must be a number more than 0 and at most 1"},
        {"/set min-p 2", "must be a number between 0 and 1"},
        {"/set repeat-penalty 0", "must be a number more than 0 and at most 10"},
        {"/set seed -3", "not a whole number"},
        {"/set n-predict 0", "> 0"},
        {"/set n-predict many", "not a whole number"},
        {"/set ignore-eos maybe", "on or off"},
        {"/set think maybe", "on or off"},
        {"/set ctx 8", "at least 16"},
        {"/set ctx 99999999", "trained for"},
        {"/set thinking-budget -1", ">= 0"},
        {"/set warp 9", "unknown setting 'warp'"},
        {"/set temp", "usage"},
    };
    for (const Case& c : cases) {
        const ChatOutcome outcome = command(c.line);
        EXPECT_TRUE(outcome.error) << c.line;
        EXPECT_NE(outcome.message.find(c.says), std::string::npos)
            << c.line << " -> " << outcome.message;
    }
    const SamplingParams after = sampler_->params();
    EXPECT_EQ(after.temperature, before.temperature);
    EXPECT_EQ(after.top_k, before.top_k);
    EXPECT_EQ(after.top_p, before.top_p);
    EXPECT_EQ(after.min_p, before.min_p);
    EXPECT_EQ(after.repeat_penalty, before.repeat_penalty);
    EXPECT_EQ(controller_->generation().max_tokens, 8);
}

TEST_F(ChatControllerTest, TurnCommitsPromptThenReplyUnderIt) {
    std::string streamed;
    const ChatOutcome outcome =
        controller_->submit("Hello there", [&](const std::string& t, TextKind) {
            streamed += t;
            return true;
        });
    ASSERT_FALSE(outcome.error) << outcome.message;
    ASSERT_TRUE(outcome.turn);
    EXPECT_EQ(outcome.turn->stats.generated_tokens, 8);
    EXPECT_EQ(roles(), (std::vector<std::string>{"user", "assistant"}));
    EXPECT_EQ(conversation_->messages().back().content, streamed);
    ASSERT_EQ(backend_.commits.size(), 2u);
    EXPECT_EQ(backend_.commits[0].message.content, "Hello there");
    EXPECT_EQ(backend_.commits[0].parent, 0);
    EXPECT_FALSE(backend_.commits[0].with_turn);
    EXPECT_EQ(backend_.commits[1].message.role, "assistant");
    EXPECT_EQ(backend_.commits[1].parent, backend_.commits[0].id);
    EXPECT_TRUE(backend_.commits[1].with_turn);
    EXPECT_EQ(controller_->message_ids(),
              (std::vector<int64_t>{backend_.commits[0].id, backend_.commits[1].id}));

    const ChatOutcome stats = command("/stats");
    EXPECT_NE(stats.message.find("8 tokens generated"), std::string::npos) << stats.message;
    EXPECT_NE(stats.message.find("recording backend"), std::string::npos) << stats.message;
    EXPECT_NE(ChatController::turn_summary(*outcome.turn).find("8 tokens"), std::string::npos);
}

TEST_F(ChatControllerTest, CancelKeepsAndCommitsThePartialReply) {
    EXPECT_FALSE(command("/set n-predict 200").error);
    std::string streamed;
    int pieces = 0;
    const ChatOutcome outcome =
        controller_->submit("Tell me a story", [&](const std::string& t, TextKind) {
            streamed += t;
            if (++pieces == 3) controller_->request_cancel();
            return true;
        });
    ASSERT_TRUE(outcome.turn);
    EXPECT_EQ(outcome.turn->finish, FinishReason::Cancelled);
    EXPECT_LT(outcome.turn->stats.generated_tokens, 200);
    EXPECT_EQ(roles(), (std::vector<std::string>{"user", "assistant"}));
    EXPECT_EQ(conversation_->messages().back().content, streamed);
    ASSERT_EQ(backend_.commits.size(), 2u);
    EXPECT_EQ(backend_.commits[1].message.content, streamed);

    // The next turn starts clean: the cancel request does not carry over.
    const ChatOutcome next = controller_->submit("Go on", nullptr);
    ASSERT_TRUE(next.turn);
    EXPECT_NE(next.turn->finish, FinishReason::Cancelled);
}

TEST_F(ChatControllerTest, RegenCommitsASiblingReply) {
    ASSERT_FALSE(controller_->submit("Hello", nullptr).error);
    const int64_t user_id = controller_->message_ids()[0];
    const int64_t first_reply = controller_->message_ids()[1];
    EXPECT_FALSE(command("/set temp 1").error);  // let the new reply differ
    const ChatOutcome regen = command("/regen");
    ASSERT_FALSE(regen.error) << regen.message;
    ASSERT_TRUE(regen.turn);
    EXPECT_EQ(roles(), (std::vector<std::string>{"user", "assistant"}));
    ASSERT_EQ(backend_.commits.size(), 3u);
    EXPECT_EQ(backend_.commits[2].parent, user_id);  // same parent as the first reply
    EXPECT_NE(controller_->message_ids()[1], first_reply);
    EXPECT_EQ(controller_->message_ids()[0], user_id);
}

TEST_F(ChatControllerTest, BranchCopiesTheConversationIntoANewSession) {
    EXPECT_TRUE(command("/branch").error);  // nothing to copy yet
    ASSERT_FALSE(controller_->submit("Hello", nullptr).error);
    const int sessions_before = backend_.new_sessions;
    const ChatOutcome branch = command("/branch");
    ASSERT_FALSE(branch.error) << branch.message;
    EXPECT_EQ(backend_.new_sessions, sessions_before + 1);
    ASSERT_EQ(backend_.commits.size(), 4u);
    EXPECT_EQ(backend_.commits[2].message.content, "Hello");
    EXPECT_EQ(backend_.commits[2].parent, 0);
    EXPECT_EQ(backend_.commits[3].parent, backend_.commits[2].id);
    EXPECT_EQ(controller_->message_ids(),
              (std::vector<int64_t>{backend_.commits[2].id, backend_.commits[3].id}));
    EXPECT_EQ(roles(), (std::vector<std::string>{"user", "assistant"}));
    // The next turn goes on in the copy.
    ASSERT_FALSE(controller_->submit("More", nullptr).error);
    EXPECT_EQ(backend_.commits[4].parent, backend_.commits[3].id);
}

// /help and Tab completion come from one table: every command completed is in the help, the
// full-screen chat's own (/copy) only there, and /preset in both.
TEST(ChatControllerParsing, HelpAndCompletionComeFromOneTable) {
    for (const bool full_screen : {false, true}) {
        const std::string help = ChatController::help_text(full_screen);
        for (const std::string& name : ChatController::command_names(full_screen)) {
            EXPECT_NE(help.find("  " + name), std::string::npos) << name << " missing from\n"
                                                                 << help;
        }
        EXPECT_NE(help.find("/preset"), std::string::npos);
        EXPECT_EQ(help.find("/copy") != std::string::npos, full_screen) << help;
    }
    const auto names = ChatController::command_names(true);
    EXPECT_NE(std::find(names.begin(), names.end(), "/copy"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "/quit"), names.end());
}

// Every command of the table: completed, in /help, and run by handle_command (whatever it
// says, never that the command is unknown); the full-screen chat's own only there; the other
// names a command answers to reach the same command.
TEST_F(ChatControllerTest, EveryCommandDispatchesAndIsInTheHelp) {
    const auto commands = ChatController::command_names();
    EXPECT_GE(commands.size(), 19u);
    for (const std::string& name : commands) {
        EXPECT_NE(ChatController::help_text().find("  " + name), std::string::npos) << name;
        EXPECT_EQ(ChatController::command_name(name), name);
        const ChatOutcome outcome = command(name);
        EXPECT_EQ(outcome.message.find("unknown command"), std::string::npos)
            << name << ": " << outcome.message;
        EXPECT_FALSE(outcome.confirm) << name << " asks a question without arguments";
    }
    for (const std::string& name : ChatController::command_names(/*full_screen=*/true)) {
        if (std::find(commands.begin(), commands.end(), name) != commands.end()) continue;
        EXPECT_NE(command(name).message.find("unknown command"), std::string::npos)
            << name << " is the full-screen chat's own";
        EXPECT_EQ(ChatController::help_text().find(name), std::string::npos) << name;
    }
    EXPECT_EQ(ChatController::command_name("/q"), "/quit");
    EXPECT_EQ(ChatController::command_name("/exit"), "/quit");
    EXPECT_EQ(ChatController::command_name("/?"), "/help");
    EXPECT_EQ(ChatController::command_name("/nope"), "/nope");
    EXPECT_TRUE(command("/q").quit);
    EXPECT_TRUE(command("/exit").quit);
    EXPECT_EQ(command("/?").message, ChatController::help_text());
}

// Every /set setting of the table: named in the usage line, refuses a value it cannot take
// with its own message (not as an unknown setting), and takes back the value it reads now.
TEST_F(ChatControllerTest, EverySettingRoundTrips) {
    // Settings that read empty until set: the template's default, otherwise.
    ASSERT_FALSE(command("/set think off").error);
    ASSERT_FALSE(command("/set reasoning-effort low").error);
    const ChatOutcome usage = command("/set temp");
    ASSERT_TRUE(usage.error);
    const auto& settings = ChatController::setting_names();
    EXPECT_EQ(settings.size(), 13u);
    for (const std::string& name : settings) {
        EXPECT_NE(usage.message.find(name), std::string::npos) << name;
        const ChatOutcome bad = command("/set " + name + " garbage");
        EXPECT_TRUE(bad.error) << name;
        EXPECT_NE(bad.message.find("/set " + name), std::string::npos) << bad.message;
        EXPECT_EQ(bad.message.find("unknown setting"), std::string::npos) << bad.message;
        const std::string value = controller_->setting_value(name);
        ASSERT_FALSE(value.empty()) << name;
        const ChatOutcome set = command("/set " + name + " " + value);
        EXPECT_FALSE(set.error) << name << " " << value << ": " << set.message;
        EXPECT_EQ(controller_->setting_value(name), value) << name;
    }
    // Other names of a setting reach it.
    EXPECT_FALSE(command("/set temperature 0.25").error);
    EXPECT_EQ(controller_->setting_value("temp"), "0.25");
    EXPECT_FALSE(command("/set max_tokens 16").error);
    EXPECT_EQ(controller_->setting_value("n-predict"), "16");
    EXPECT_TRUE(command("/set nope 1").error);
    EXPECT_EQ(controller_->setting_value("nope"), "");
}

TEST_F(ChatControllerTest, EditBranchesFromTheOldPromptsParent) {
    ASSERT_FALSE(controller_->submit("First", nullptr).error);
    ASSERT_FALSE(controller_->submit("Second", nullptr).error);
    const int64_t first_reply = controller_->message_ids()[1];
    const ChatOutcome edit = command("/edit Second, edited");
    ASSERT_FALSE(edit.error) << edit.message;
    EXPECT_EQ(roles(), (std::vector<std::string>{"user", "assistant", "user", "assistant"}));
    EXPECT_EQ(conversation_->messages()[2].content, "Second, edited");
    ASSERT_EQ(backend_.commits.size(), 6u);
    EXPECT_EQ(backend_.commits[4].message.content, "Second, edited");
    EXPECT_EQ(backend_.commits[4].parent, first_reply);
    EXPECT_EQ(backend_.commits[5].parent, backend_.commits[4].id);
}

TEST_F(ChatControllerTest, SystemNewAndLoad) {
    EXPECT_NE(command("/system").message.find("no system prompt"), std::string::npos);
    EXPECT_FALSE(command("/system Be brief.").error);
    EXPECT_EQ(backend_.system_prompt, "Be brief.");
    EXPECT_NE(command("/system").message.find("Be brief."), std::string::npos);
    ASSERT_FALSE(controller_->submit("Hi", nullptr).error);
    EXPECT_EQ(roles(), (std::vector<std::string>{"system", "user", "assistant"}));
    EXPECT_EQ(controller_->message_ids().size(), 2u);

    const int sessions_before = backend_.new_sessions;
    const ChatOutcome fresh = command("/new");
    EXPECT_TRUE(fresh.conversation_replaced);
    EXPECT_EQ(roles(), (std::vector<std::string>{"system"}));  // the system prompt stays
    EXPECT_TRUE(controller_->message_ids().empty());
    EXPECT_EQ(backend_.new_sessions, sessions_before + 1);
    EXPECT_TRUE(command("/stats").message.find("no reply yet") != std::string::npos);

    ui::LoadedSession saved;
    saved.summary.id = "abc";
    saved.summary.title = "Old chat";
    saved.system_prompt = "Be kind.";
    saved.messages = {{"user", "Hey", {}, {}}, {"assistant", "Hello!", {}, {}}};
    saved.message_ids = {7, 8};
    backend_.stored = saved;
    const ChatOutcome loaded = command("/load abc");
    ASSERT_FALSE(loaded.error) << loaded.message;
    EXPECT_TRUE(loaded.conversation_replaced);
    EXPECT_EQ(roles(), (std::vector<std::string>{"system", "user", "assistant"}));
    EXPECT_EQ(conversation_->messages()[0].content, "Be kind.");
    EXPECT_EQ(controller_->message_ids(), (std::vector<int64_t>{7, 8}));
    ASSERT_FALSE(controller_->submit("More", nullptr).error);
    EXPECT_EQ(backend_.commits[backend_.commits.size() - 2].parent, 8);
}

TEST_F(ChatControllerTest, FailedTurnLeavesTheConversationAsItWas) {
    make_controller(64);
    ASSERT_FALSE(controller_->submit("Hi", nullptr).error);
    const auto before = conversation_->messages().size();
    const auto ids_before = controller_->message_ids();
    std::string huge;
    for (int i = 0; i < 200; ++i) huge += "word ";
    const ChatOutcome outcome = controller_->submit(huge, nullptr);
    EXPECT_TRUE(outcome.error);
    EXPECT_NE(outcome.message.find("could not answer"), std::string::npos) << outcome.message;
    EXPECT_EQ(conversation_->messages().size(), before);
    EXPECT_EQ(controller_->message_ids(), ids_before);
    // And the chat carries on.
    EXPECT_FALSE(controller_->submit("Again", nullptr).error);
}

// Stands in for app/'s switcher: says which model answers and fails for unknown names.
class FakeSwitcher final : public ui::ModelSwitcher {
public:
    std::string current = "first.gguf";
    int switches = 0;
    std::string current_name() const override { return current; }
    std::string current_path() const override { return "/models/" + current; }
    std::vector<std::string> candidates() override { return {"first", "second"}; }
    std::string switch_to(const std::string& name, const std::function<bool()>&) override {
        if (name != "second") throw std::runtime_error("model '" + name + "': no such file");
        ++switches;
        current = "second.gguf";
        return "now chatting with second.gguf";
    }
};

TEST_F(ChatControllerTest, ModelSwitchesListsAndRefusesWithoutASwitcher) {
    // A chat whose model cannot be switched (a remote one) says so.
    ChatOutcome out = command("/model second");
    EXPECT_TRUE(out.error);
    EXPECT_NE(out.message.find("server"), std::string::npos) << out.message;
    EXPECT_TRUE(controller_->model_name().empty());

    FakeSwitcher switcher;
    controller_->set_model_switcher(&switcher);
    ASSERT_FALSE(controller_->submit("Hi", nullptr).error);
    ASSERT_TRUE(controller_->last_turn().has_value());
    EXPECT_EQ(controller_->model_names(), (std::vector<std::string>{"first", "second"}));

    out = command("/model");
    EXPECT_FALSE(out.error);
    EXPECT_NE(out.message.find("model: first.gguf (/models/first.gguf)"), std::string::npos)
        << out.message;
    EXPECT_NE(out.message.find("\n  second"), std::string::npos) << out.message;

    // A name that fails: one line, nothing changes.
    out = command("/model nope");
    EXPECT_TRUE(out.error);
    EXPECT_EQ(out.message, "/model: model 'nope': no such file");
    EXPECT_FALSE(out.conversation_replaced);
    EXPECT_EQ(controller_->model_name(), "first.gguf");
    EXPECT_TRUE(controller_->last_turn().has_value());

    // A switch: the front end redraws; the last reply's numbers were the old model's.
    out = command("/model second");
    EXPECT_FALSE(out.error);
    EXPECT_TRUE(out.conversation_replaced);
    EXPECT_EQ(out.message, "now chatting with second.gguf");
    EXPECT_EQ(switcher.switches, 1);
    EXPECT_EQ(controller_->model_name(), "second.gguf");
    EXPECT_FALSE(controller_->last_turn().has_value());
    EXPECT_EQ(roles(), (std::vector<std::string>{"user", "assistant"}));
}

// Stands in for app/'s switcher loading a large file: the load goes on until its stop says
// yes (LoadOptions::stop), then ends the way Model::load does, by throwing.
class SlowSwitcher final : public ui::ModelSwitcher {
public:
    std::atomic<bool> loading{false};
    int questions = 0;
    std::string current_name() const override { return "first.gguf"; }
    std::string current_path() const override { return "/models/first.gguf"; }
    std::vector<std::string> candidates() override { return {"big"}; }
    std::string switch_to(const std::string& name, const std::function<bool()>& stop) override {
        loading = true;
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (std::chrono::steady_clock::now() < give_up) {
            ++questions;
            if (stop && stop()) throw std::runtime_error("loading " + name + " stopped");
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return "now chatting with " + name;
    }
};

// Esc / Ctrl-C during /model of a large file (request_cancel from the front end's thread)
// stops the load: the chat goes on with its model and says so in one line.
TEST_F(ChatControllerTest, ModelLoadStopsWhenCancelled) {
    SlowSwitcher switcher;
    controller_->set_model_switcher(&switcher);
    ASSERT_FALSE(controller_->submit("Hi", nullptr).error);
    // A cancel left from before the command does not stop it: only one during the load does.
    controller_->request_cancel();
    std::thread front_end([&] {
        while (!switcher.loading) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        controller_->request_cancel();
    });
    const auto start = std::chrono::steady_clock::now();
    const ChatOutcome out = command("/model big");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    front_end.join();
    EXPECT_FALSE(out.error) << out.message;
    EXPECT_EQ(out.message, "/model: loading big stopped; first.gguf still answers");
    EXPECT_FALSE(out.conversation_replaced);
    EXPECT_GT(switcher.questions, 1);  // it was loading, not stopped at once by the old cancel
    EXPECT_LT(seconds, 10.0);          // not the switcher's own 20 s limit
    EXPECT_EQ(controller_->model_name(), "first.gguf");
    EXPECT_TRUE(controller_->last_turn().has_value());
    EXPECT_EQ(roles(), (std::vector<std::string>{"user", "assistant"}));
}

// /file of a large file (16 MiB: seconds to count its tokens) stops when cancelled from the
// front end's thread, attaching nothing; a small file still attaches afterwards.
TEST_F(ChatControllerTest, FileOfALargeFileStopsWhenCancelled) {
    TempDir dir("ember-file-stop");
    const std::string big = dir.file("big.txt");
    {
        std::ofstream out(big);
        std::string line;
        for (int i = 0; line.size() < 4096; ++i) line += "word" + std::to_string(i % 97) + " ";
        line += "\n";
        for (size_t written = 0; written + line.size() <= (size_t{16} << 20);
             written += line.size()) {
            out << line;
        }
    }
    // A context of 512 cannot hold it even at the vocabulary's longest token per token: refused
    // before its tokens are counted.
    const ChatOutcome refused = command("/file " + big);
    EXPECT_TRUE(refused.error);
    EXPECT_NE(refused.message.find("big.txt is at least "), std::string::npos) << refused.message;
    EXPECT_NE(refused.message.find("nothing attached"), std::string::npos) << refused.message;
    EXPECT_TRUE(controller_->pending_attachments().empty());

    // A context it might fit (the longest entry of this vocabulary is 162 bytes): counted, and
    // the count stops when cancelled.
    make_controller(131072);
    std::atomic<bool> counting{false};
    std::thread front_end([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        counting = true;
        controller_->request_cancel();
    });
    const auto start = std::chrono::steady_clock::now();
    const ChatOutcome out = command("/file " + big);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    front_end.join();
    // Stopped while counting (had it finished first, it would have said how many tokens).
    EXPECT_TRUE(counting.load());
    EXPECT_FALSE(out.error) << out.message;
    EXPECT_EQ(out.message, "/file: stopped; nothing attached");
    EXPECT_TRUE(controller_->pending_attachments().empty());
    EXPECT_LT(seconds, 5.0);

    const std::string small = dir.file("small.txt");
    std::ofstream(small) << "a small note";
    const ChatOutcome attached = command("/file " + small);
    EXPECT_FALSE(attached.error) << attached.message;
    EXPECT_NE(attached.message.find("attached small.txt"), std::string::npos) << attached.message;
    EXPECT_EQ(controller_->pending_attachments().size(), 1u);
}

TEST(MultilineInput, BackslashContinuesAndTripleQuotesMakeABlock) {
    ui::MultilineInput input;
    auto done = input.feed("plain line");
    ASSERT_TRUE(done);
    EXPECT_EQ(done->text, "plain line");
    EXPECT_FALSE(done->from_block);

    EXPECT_FALSE(input.feed("first \\"));
    EXPECT_TRUE(input.pending());
    EXPECT_FALSE(input.feed("second\\"));
    done = input.feed("third");
    ASSERT_TRUE(done);
    EXPECT_EQ(done->text, "first \nsecond\nthird");
    EXPECT_FALSE(input.pending());

    EXPECT_FALSE(input.feed("\"\"\""));
    EXPECT_TRUE(input.pending());
    EXPECT_FALSE(input.feed("/not a command"));
    EXPECT_FALSE(input.feed(""));
    EXPECT_FALSE(input.feed("ends with \\"));  // no continuation inside a block
    done = input.feed("\"\"\"");
    ASSERT_TRUE(done);
    EXPECT_EQ(done->text, "/not a command\n\nends with \\");
    EXPECT_TRUE(done->from_block);

    EXPECT_FALSE(input.feed("abandoned \\"));
    input.reset();
    EXPECT_FALSE(input.pending());
    done = input.feed("fresh");
    ASSERT_TRUE(done);
    EXPECT_EQ(done->text, "fresh");
}

// /preset B after /preset A: B's settings over the chat's own, none of A's left (A's top_k
// goes back); each change is recorded for the conversation.
TEST_F(ChatControllerTest, PresetsReplaceEachOtherInsteadOfStacking) {
    SamplingParams base = sampler_->params();
    base.top_k = 40;
    base.temperature = 0.8f;
    ASSERT_NO_THROW(sampler_->set_params(base));
    ui::Presets presets;
    presets["a"].sampling = {{"top_k", 5}, {"temp", 0.2}};
    presets["a"].system = "Be brief.";
    presets["b"].sampling = {{"temp", 0.5}};
    controller_->set_presets(presets, "/cfg/config.json", {base, std::nullopt, ""});
    const size_t recorded = backend_.settings.size();
    ASSERT_FALSE(command("/preset a").error);
    EXPECT_EQ(sampler_->params().top_k, 5);
    EXPECT_FLOAT_EQ(sampler_->params().temperature, 0.2f);
    EXPECT_EQ(roles().front(), "system");
    const ChatOutcome b = command("/preset b");
    ASSERT_FALSE(b.error) << b.message;
    EXPECT_EQ(sampler_->params().top_k, 40) << "a's top_k must not stay: " << b.message;
    EXPECT_FLOAT_EQ(sampler_->params().temperature, 0.5f);
    EXPECT_TRUE(roles().empty() || roles().front() != "system") << "a's system prompt stays";
    ASSERT_GE(backend_.settings.size(), recorded + 2);
    EXPECT_EQ(backend_.settings.back().sampling.top_k, 40);
    const ChatOutcome missing = command("/preset c");
    EXPECT_TRUE(missing.error);
    EXPECT_NE(missing.message.find("presets: a, b"), std::string::npos) << missing.message;
}

// /set is recorded for the conversation; a load brings the stored settings back.
TEST_F(ChatControllerTest, SettingsAreRecordedAndComeBackWithALoad) {
    ASSERT_FALSE(command("/set temp 0.3").error);
    ASSERT_FALSE(backend_.settings.empty());
    EXPECT_FLOAT_EQ(backend_.settings.back().sampling.temperature, 0.3f);
    ui::LoadedSession stored;
    stored.summary.id = "old";
    stored.summary.title = "old";
    ui::ChatSettings settings;
    settings.sampling.temperature = 0.25f;
    settings.sampling.top_k = 7;
    settings.max_tokens = 5;
    settings.fixed_seed = 1234;
    stored.settings = settings;
    backend_.stored = stored;
    const ChatOutcome loaded = command("/load old");
    ASSERT_FALSE(loaded.error) << loaded.message;
    EXPECT_FLOAT_EQ(sampler_->params().temperature, 0.25f);
    EXPECT_EQ(sampler_->params().top_k, 7);
    EXPECT_EQ(controller_->generation().max_tokens, 5);
    ASSERT_TRUE(controller_->settings().fixed_seed);
    EXPECT_EQ(*controller_->settings().fixed_seed, 1234u);
}

// What was attached goes with the prompt's commit, and the transcript shows it collapsed.
TEST_F(ChatControllerTest, AttachmentsAreNotedWithThePrompt) {
    ui::AttachmentNote note{"File: notes.txt", 12, 0};
    const std::string shown = ChatController::shown_prompt("what is this?", {note});
    EXPECT_EQ(shown, "[attached] File: notes.txt (12 bytes)\n\nwhat is this?");
    ui::MessageNotes notes;
    notes.attachments.push_back({"Output of: ls", 4, 6});
    EXPECT_EQ(ChatController::shown_message("abcdefTyped", notes),
              "[attached] Output of: ls (4 bytes)\n\nTyped");
    // A record longer than the content (an edited file): the content as it is.
    notes.attachments[0].length = 99;
    EXPECT_EQ(ChatController::shown_message("short", notes), "short");
}

}  // namespace
}  // namespace ember::test
