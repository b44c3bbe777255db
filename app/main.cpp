#include <cstdio>

int main() {
    std::puts("ember: under construction");
    return 0;
}
