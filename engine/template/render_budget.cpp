#include "engine/template/render_budget.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "engine/template/template_value.h"  // fail()

namespace ember::jinja {

namespace {

// The render running on this thread (see current_budget()).
thread_local RenderBudget* t_budget = nullptr;

// "10000000" -> "10,000,000": the limit reads at a glance in the error.
std::string with_commas(std::int64_t n) {
    const std::string digits = std::to_string(n);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
        out.push_back(digits[i]);
    }
    return out;
}

}  // namespace

RenderBudget::RenderBudget(std::int64_t input_text_bytes)
    : text_limit_(kRenderTextFloor +
                  std::min(input_text_bytes, (INT64_MAX / 2) / kRenderTextPerInputByte) *
                      kRenderTextPerInputByte) {
    static std::atomic<std::uint64_t> renders{0};
    serial_ = ++renders;
}

void RenderBudget::steps_exceeded() const {
    fail("exceeded the budget of " + with_commas(kMaxRenderSteps) +
         " evaluation steps (a runaway loop?)");
}

void RenderBudget::text_exceeded() const {
    const std::int64_t mib = (text_limit_ + (std::int64_t{1} << 20) - 1) >> 20;
    fail("exceeded the budget of " + with_commas(mib) +
         " MiB of text and containers (a runaway string, list or dict?)");
}

RenderBudget* current_budget() noexcept {
    return t_budget;
}

BudgetScope::BudgetScope(RenderBudget* budget) : saved_(t_budget) {
    t_budget = budget;
}

BudgetScope::~BudgetScope() {
    t_budget = saved_;
}

}  // namespace ember::jinja
