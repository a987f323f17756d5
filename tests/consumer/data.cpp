// A consumer of petra::data: writes a small IDX file, reads it back as an
// xtensor array through petra/data.hpp, and checks it.
#include <petra/data.hpp>
#include <petra/version.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

int main()
{
    const std::string path =
        (std::filesystem::temp_directory_path() / ("petra_consumer_data." + std::to_string(::getpid()) + ".idx"))
            .string();
    {
        // Magic (unsigned bytes, 2 dimensions), 2 x 3, then the values 1 to 6.
        const unsigned char bytes[] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};
        std::ofstream out(path, std::ios::binary);
        out.write(reinterpret_cast<const char*>(bytes), sizeof bytes);
    }
    const auto values = petra::read_idx(path);
    std::filesystem::remove(path);
    if (values.dimension() != 2 || values.shape()[0] != 2 || values.shape()[1] != 3 || values(1, 2) != 6) {
        std::printf("consumer (data): the IDX file read back wrong\n");
        return 1;
    }
    std::printf("consumer (data): petra %s reads IDX files\n", PETRA_VERSION_STRING);
    return 0;
}
