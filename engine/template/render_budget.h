// What one render may spend, and the render running on this thread. Its own unit because
// both sides of the template library need it: the interpreter sets the budget for a render
// (BudgetScope), and the value and string helpers deep in the library charge it.
#pragma once

#include <cstdint>

namespace ember::jinja {

// What one render may spend, so that a hostile or broken template (tokenizer.chat_template
// comes from whoever made the GGUF file) ends with an error instead of running forever or
// eating all memory. Real chat templates stay far below both limits: the 13 fixture templates
// take at most 1,719 steps for a 4-message conversation, and build 3 to 17 times the bytes
// they print.
//
// 10 million steps: a chat template does a few hundred steps per message, so this allows
// conversations of tens of thousands of messages, yet stops two nested range(100000) loops
// in about 0.6 s (4.5 s before a loop's `loop` variable was built only when read).
constexpr std::int64_t kMaxRenderSteps = 10'000'000;
// 64 MiB of text built (every string an expression yields, every byte printed), plus
// kRenderTextPerInputByte for each byte of text in the variables: a template that copies a
// long conversation a few times over must not fail, while doubling a string with `~` is
// stopped after about 26 rounds with the process using at most a few hundred MiB.
constexpr std::int64_t kRenderTextFloor = std::int64_t{64} << 20;
// Templates reference each message's content several times (tests, splits, strips, the
// printed copy), and each reference of a string costs its length.
constexpr std::int64_t kRenderTextPerInputByte = 32;

class RenderBudget {
public:
    explicit RenderBudget(std::int64_t input_text_bytes);
    // One step of evaluation: a statement, an expression, a loop iteration, an item iterated.
    void step(std::int64_t n = 1) {
        steps_ += n;
        if (steps_ > kMaxRenderSteps) steps_exceeded();
    }
    // `bytes` of text were built.
    void charge_text(std::int64_t bytes) {
        text_ += bytes;
        if (text_ + live_ > text_limit_) text_exceeded();
    }
    // Lists and dicts alive take `bytes` more (or, negative, less): they count in the same
    // budget as the text built, for as long as they live.
    void charge_live(std::int64_t bytes) {
        live_ += bytes;
        if (bytes > 0 && text_ + live_ > text_limit_) text_exceeded();
    }
    // Fails if building `bytes` more text would exceed the budget; charges nothing.
    void check_room(std::int64_t bytes) const {
        if (bytes > text_limit_ - text_ - live_) text_exceeded();
    }
    std::int64_t steps() const { return steps_; }
    std::int64_t text() const { return text_; }
    // Tells renders apart (a container charged by one is not given back to another).
    std::uint64_t serial() const { return serial_; }

private:
    [[noreturn]] void steps_exceeded() const;
    [[noreturn]] void text_exceeded() const;
    std::int64_t steps_ = 0;
    std::int64_t text_ = 0;
    std::int64_t live_ = 0;
    std::int64_t text_limit_;
    std::uint64_t serial_;
};

// The budget of the render running on this thread, or nullptr outside a render. A thread-local
// lets string helpers deep in the library check it without an Interpreter at hand.
RenderBudget* current_budget() noexcept;

// Makes `budget` the thread's current one for as long as it lives; the one before comes back
// when it ends, so renders can nest.
class BudgetScope {
public:
    explicit BudgetScope(RenderBudget* budget);
    ~BudgetScope();
    BudgetScope(const BudgetScope&) = delete;
    BudgetScope& operator=(const BudgetScope&) = delete;

private:
    RenderBudget* saved_;
};

}  // namespace ember::jinja
