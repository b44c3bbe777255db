#include "tests/support/fixtures.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ember::test {

std::string fixtures_dir() {
    if (const char* env = std::getenv("EMBER_FIXTURES_DIR")) return env;
    return EMBER_FIXTURES_DIR;
}

std::string fixture_path(const std::string& relative) {
    return fixtures_dir() + "/" + relative;
}

bool fixture_exists(const std::string& relative) {
    return std::filesystem::exists(fixture_path(relative));
}

bool running_in_ci() {
    const char* ci = std::getenv("CI");
    return ci != nullptr && std::string(ci) == "true";
}

std::string ember_binary() {
    return EMBER_BINARY;
}

std::string real_model_path(const RealModel& model) {
    if (const char* env = std::getenv(model.env); env != nullptr && *env != '\0') return env;
    std::string data_home;
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg != nullptr && *xdg == '/') {
        data_home = xdg;
    } else if (const char* home = std::getenv("HOME")) {
        data_home = std::string(home) + "/.local/share";
    }
    return data_home + "/ember/models/" + model.file_name;
}

bool real_model_exists(const RealModel& model) {
    return std::filesystem::is_regular_file(real_model_path(model));
}

std::string real_model_reference(const std::string& relative, const RealModel& model) {
    return std::string(EMBER_SOURCE_DIR) + "/tests/data/" + model.name + "/" + relative;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        ADD_FAILURE() << "cannot read " << path;
        return {};
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace ember::test
