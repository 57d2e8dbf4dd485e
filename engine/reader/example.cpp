// example.cpp: RoPE rows for a C++ inference loop, read from the posenc engine's shared memory.
//
//     cc -std=c11 -O2 -c engine/reader/posenc_shm.c -o posenc_shm.o
//     c++ -std=c++17 -O2 -I engine/reader engine/reader/example.cpp posenc_shm.o -o posenc-example
//     ./posenc-example llama-2-7b 0 17 4095        # (name of a configured rope table, positions)
//
// Gathers the half-width cos/sin rows of the float32 table and expands them to the half_split
// layout (Llama rotate_half: [h | h]). Rows past the table are computed here with the engine's
// formula, cos(float64(p) * inv_freq64[k]) * attention_scaling rounded once to float32; libm's cos
// may differ from the engine's in a last float64 bit, so a rare value may differ by one float32
// ulp: a caller that needs the service's exact bytes asks it (docs/shm-format.md, "Past the end").
#include "posenc_shm.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace {

struct Conn {
    posenc_conn *c = nullptr;
    ~Conn() { posenc_close(c); }
};
struct Table {
    posenc_table *t = nullptr;
    ~Table() { posenc_table_close(t); }
};

int fail(const char *what, int status) {
    std::fprintf(stderr, "%s: %s\n", what, posenc_strerror(status));
    return 1;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s TABLE_NAME POSITION...\n", argv[0]);
        return 2;
    }
    const char *shm_dir = std::getenv("POSENC_SHM_DIR"), *ns = std::getenv("POSENC_NAMESPACE");
    Conn conn;
    Table table;
    int st = posenc_connect(shm_dir, ns, &conn.c);
    if (st != POSENC_OK) return fail("connect", st);
    if ((st = posenc_open_named(conn.c, argv[1], "float32", &table.t)) != POSENC_OK) return fail(argv[1], st);

    posenc_array cos_arr, inv_arr;
    if ((st = posenc_table_array(table.t, "cos", &cos_arr)) != POSENC_OK
        || (st = posenc_table_array(table.t, "inv_freq64", &inv_arr)) != POSENC_OK)
        return fail("not a rope table", st);
    double scaling = 1.0;
    posenc_table_meta(table.t, "attention_scaling", &scaling);
    const std::size_t half = static_cast<std::size_t>(cos_arr.shape[1]);
    const auto *inv_freq = static_cast<const double *>(inv_arr.data);

    std::vector<int64_t> positions;
    for (int i = 2; i < argc; i++) positions.push_back(std::strtoll(argv[i], nullptr, 10));
    std::vector<float> cos_half(positions.size() * half), sin_half(cos_half.size());
    std::size_t past = 0;
    st = posenc_gather_rows(table.t, "cos", positions.data(), positions.size(), cos_half.data(), &past);
    if (st == POSENC_OK)
        st = posenc_gather_rows(table.t, "sin", positions.data(), positions.size(), sin_half.data(), &past);
    if (st == POSENC_PAST_END) {   // some rows are not stored: compute every row (a simple choice)
        for (std::size_t r = 0; r < positions.size(); r++)
            for (std::size_t k = 0; k < half; k++) {
                double angle = static_cast<double>(positions[r]) * inv_freq[k];
                cos_half[r * half + k] = static_cast<float>(std::cos(angle) * scaling);
                sin_half[r * half + k] = static_cast<float>(std::sin(angle) * scaling);
            }
        std::printf("(position %lld is past the table's %lld rows: computed here)\n",
                    static_cast<long long>(positions[past]), static_cast<long long>(posenc_table_length(table.t)));
    } else if (st != POSENC_OK) {
        return fail("gather", st);
    }

    for (std::size_t r = 0; r < positions.size(); r++) {   // half_split: cos row = [h | h]
        std::vector<float> row(2 * half);
        for (std::size_t k = 0; k < half; k++) row[k] = row[k + half] = cos_half[r * half + k];
        std::printf("cos[%lld][0..3] = %g %g %g %g (d=%zu)\n", static_cast<long long>(positions[r]), row[0],
                    row[1], row[2], row[3 % row.size()], row.size());
    }
    return 0;
}
