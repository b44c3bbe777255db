#include "app/models/recorded_model.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "app/models/model_locator.h"
#include "app/store/session_adapter.h"
#include "engine/model/model.h"
#include "ui/io/terminal_text.h"

namespace ember::app {

namespace fs = std::filesystem;

namespace {

// The fingerprint of the model in `path` (mapped, not rewritten into panels); empty when the
// file does not load as a model.
std::string fingerprint_of(const std::string& path) {
    try {
        LoadOptions options;
        options.weight_panels = false;
        return Model::load(path, options)->fingerprint();
    } catch (const std::exception&) {
        return {};
    }
}

bool is_regular_file(const std::string& path) {
    std::error_code ec;
    return !path.empty() && fs::is_regular_file(path, ec);
}

}  // namespace

std::string recorded_model_path(const sessions::ConversationInfo& info, std::FILE* err) {
    if (is_regular_file(info.model_path)) return info.model_path;
    // The file moved (or the conversation predates stored paths): among the models Ember
    // finds, the one with the recorded fingerprint; files of the recorded name first.
    std::vector<FoundModel> found = find_models(model_dirs());
    const std::string name = fs::path(info.model).filename().string();
    std::stable_partition(found.begin(), found.end(), [&](const FoundModel& m) {
        return fs::path(m.path).filename().string() == name;
    });
    for (const FoundModel& m : found) {
        if (!info.model_fingerprint.empty() && fingerprint_of(m.path) == info.model_fingerprint) {
            ui::TextWriter note(err);
            note.raw("ember: conversation ").text(info.public_id).raw(": its model ");
            if (!info.model_path.empty()) {
                note.text(info.model_path).raw(" is gone; found the same model at ");
            } else {
                note.text(info.model).raw(" found at ");
            }
            note.text(m.path).raw("\n");
            return m.path;
        }
    }
    const std::string recorded = info.model_path.empty() ? info.model : info.model_path;
    throw std::runtime_error("conversation " + info.public_id + " was recorded with " + recorded +
                             ", which is not there, and no model Ember finds (ember models) "
                             "has its fingerprint; give the model with -m");
}

sessions::ConversationInfo conversation_to_resume(const std::string& db_path,
                                                  const std::string& resume_id) {
    const std::string path = db_path.empty() ? default_db_path() : db_path;
    check_db_path(path);
    std::error_code ec;
    if (!fs::exists(path, ec)) throw std::runtime_error("no session database at " + path);
    auto db = open_session_db(path, DbUse::write, "--no-db chats without saving");
    sessions::SessionStore store(*db);
    std::optional<sessions::ConversationInfo> info =
        resume_id.empty() ? store.most_recent() : store.find(resume_id);
    if (!info && resume_id.empty()) {
        throw std::runtime_error("no saved conversation to continue in " + path);
    }
    if (!info) {
        throw std::runtime_error("no saved conversation '" + resume_id + "' in " + path +
                                 " (ember sessions list shows them)");
    }
    return *info;
}

}  // namespace ember::app
