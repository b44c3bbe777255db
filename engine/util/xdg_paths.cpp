#include "engine/util/xdg_paths.h"

#include <cstdlib>

namespace ember {

namespace {

std::string env_dir(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && value[0] == '/' ? std::string(value) : std::string();
}

std::string xdg_dir(const char* name, const char* home_relative) {
    std::string dir = env_dir(name);
    if (!dir.empty()) return dir;
    const std::string home = home_dir();
    return home.empty() ? std::string() : home + "/" + home_relative;
}

}  // namespace

std::string home_dir() {
    return env_dir("HOME");
}

std::string xdg_data_home() {
    return xdg_dir("XDG_DATA_HOME", ".local/share");
}

std::string xdg_config_home() {
    return xdg_dir("XDG_CONFIG_HOME", ".config");
}

std::string xdg_cache_home() {
    return xdg_dir("XDG_CACHE_HOME", ".cache");
}

}  // namespace ember
