// A file written whole or not at all (floor 1): the bytes go to
// "<path>.partial.<pid>" in the same directory; commit() flushes them to
// disk and renames the file over <path>, so that a crash leaves the old
// file or the new one, never a mixture. Destroyed without commit() (an
// error while writing), it removes the partial file and <path> is
// untouched. Errors are reported with raise_error (error.hpp) as
// runtime_error, naming the file and, if given, the caller ("export_onnx:
// 'model.onnx.partial.42' cannot be written (No such file or directory).").
//
//   replacing_file out("weights.npz", "save_npz");
//   out.write(bytes, size);
//   out.commit();
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include <petra/error.hpp>

namespace petra {

class replacing_file {
public:
    explicit replacing_file(std::string path, std::string_view caller = {})
        : path_(std::move(path)), partial_(path_ + ".partial." + std::to_string(::getpid())),
          caller_(caller.empty() ? std::string() : std::string(caller) + ": ")
    {
        file_ = std::fopen(partial_.c_str(), "wb");
        if (file_ == nullptr) fail("cannot be written (" + std::string(std::strerror(errno)) + ")", partial_);
    }
    replacing_file(const replacing_file&) = delete;
    replacing_file& operator=(const replacing_file&) = delete;
    ~replacing_file() { discard(); }

    const std::string& path() const { return path_; }

    void write(const void* data, std::size_t size)
    {
        if (file_ == nullptr)
            raise_error(error_kind::logic_error, caller_ + "'" + path_ + "': written after commit().");
        if (size > 0 && std::fwrite(data, 1, size, file_) != size) fail_io();
        written_ += size;
    }
    // Bytes written so far.
    std::size_t size() const { return written_; }

    // Writes over bytes already written, from `offset` (a header whose
    // fields are known only at the end); later writes go on at the end.
    void overwrite(std::size_t offset, const void* data, std::size_t size)
    {
        if (file_ == nullptr)
            raise_error(error_kind::logic_error, caller_ + "'" + path_ + "': written after commit().");
        if (offset + size > written_) {
            raise_error(error_kind::logic_error, caller_ + "'" + path_ + "': overwrite() past the bytes written.");
        }
        if (std::fseek(file_, long(offset), SEEK_SET) != 0 || std::fwrite(data, 1, size, file_) != size ||
            std::fseek(file_, 0, SEEK_END) != 0) {
            fail_io();
        }
    }

    // Flushes the file to disk and renames it over path(). Once only.
    void commit()
    {
        if (file_ == nullptr) raise_error(error_kind::logic_error, caller_ + "'" + path_ + "': commit() called twice.");
        if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) fail_io();
        const int closed = std::fclose(std::exchange(file_, nullptr));
        if (closed != 0) {
            std::remove(partial_.c_str());
            fail_io();
        }
        if (std::rename(partial_.c_str(), path_.c_str()) != 0) {
            const std::string reason = std::strerror(errno);
            std::remove(partial_.c_str());
            fail("cannot be replaced (" + reason + ")", path_);
        }
        // The rename itself reaches the disk with the directory.
        const std::size_t slash = path_.rfind('/');
        const std::string directory = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
        const int descriptor = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY);
        if (descriptor >= 0) {
            ::fsync(descriptor);
            ::close(descriptor);
        }
    }

private:
    void discard()
    {
        if (file_ != nullptr) {
            std::fclose(std::exchange(file_, nullptr));
            std::remove(partial_.c_str());
        }
    }
    [[noreturn]] void fail_io()
    {
        const std::string reason = std::strerror(errno);
        discard();
        fail("could not be written (" + reason + ")", partial_);
    }
    [[noreturn]] void fail(const std::string& what, const std::string& path) const
    {
        raise_error(error_kind::runtime_error, caller_ + "'" + path + "' " + what + ".");
    }

    std::string path_;
    std::string partial_;
    std::string caller_; // "export_onnx: ", or empty
    std::FILE* file_ = nullptr;
    std::size_t written_ = 0;
};

} // namespace petra
