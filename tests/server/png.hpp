#pragma once
// Just enough PNG for the dashboard test to look at a browser's screenshot: 8-bit RGB or RGBA,
// not interlaced (what Chromium writes), decoded to RGB rows with zlib.
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace hotcold::test {

struct rgb_image {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height x width x 3
  const uint8_t* at(uint32_t x, uint32_t y) const { return rgb.data() + (static_cast<size_t>(y) * width + x) * 3; }
  // Pixels of exactly the colour 0xRRGGBB.
  size_t count(uint32_t colour) const {
    size_t n = 0;
    for (size_t i = 0; i + 2 < rgb.size(); i += 3) n += rgb[i] == (colour >> 16 & 0xff) && rgb[i + 1] == (colour >> 8 & 0xff) && rgb[i + 2] == (colour & 0xff);
    return n;
  }
};

inline rgb_image read_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto u32 = [&](size_t at) {
    if (at + 4 > b.size()) throw std::runtime_error(path + ": truncated");
    return (uint32_t{static_cast<uint8_t>(b[at])} << 24) | (uint32_t{static_cast<uint8_t>(b[at + 1])} << 16) |
           (uint32_t{static_cast<uint8_t>(b[at + 2])} << 8) | uint32_t{static_cast<uint8_t>(b[at + 3])};
  };
  if (b.size() < 8 || b.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) throw std::runtime_error(path + ": not a PNG");
  rgb_image img;
  int channels = 0;
  std::string idat;
  for (size_t at = 8; at + 8 <= b.size();) {
    const uint32_t len = u32(at);
    const std::string type = b.substr(at + 4, 4);
    if (at + 12 + len > b.size()) throw std::runtime_error(path + ": truncated chunk " + type);
    if (type == "IHDR") {
      img.width = u32(at + 8), img.height = u32(at + 12);
      const int depth = static_cast<uint8_t>(b[at + 16]), color = static_cast<uint8_t>(b[at + 17]), interlace = static_cast<uint8_t>(b[at + 20]);
      if (depth != 8 || (color != 2 && color != 6) || interlace != 0) throw std::runtime_error(path + ": only 8-bit RGB/RGBA, not interlaced");
      channels = color == 2 ? 3 : 4;
    } else if (type == "IDAT") {
      idat.append(b, at + 8, len);
    } else if (type == "IEND") {
      break;
    }
    at += 12 + len;
  }
  if (!channels) throw std::runtime_error(path + ": no IHDR");
  const size_t stride = static_cast<size_t>(img.width) * static_cast<size_t>(channels);
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK || raw_len != raw.size())
    throw std::runtime_error(path + ": bad image data");
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  img.rgb.resize(static_cast<size_t>(img.width) * img.height * 3);
  for (uint32_t y = 0; y < img.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = raw.data() + y * (stride + 1) + 1;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<size_t>(channels) ? cur[i - static_cast<size_t>(channels)] : 0, up = prev[i];
      const int c = i >= static_cast<size_t>(channels) ? prev[i - static_cast<size_t>(channels)] : 0;
      int pred = 0;
      switch (filter) {
        case 0: pred = 0; break;
        case 1: pred = a; break;
        case 2: pred = up; break;
        case 3: pred = (a + up) / 2; break;
        case 4: {
          const int p = a + up - c, pa = std::abs(p - a), pb = std::abs(p - up), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? up : c;
          break;
        }
        default: throw std::runtime_error(path + ": bad filter");
      }
      cur[i] = static_cast<uint8_t>(in[i] + pred);
    }
    for (uint32_t x = 0; x < img.width; ++x)
      for (int k = 0; k < 3; ++k) img.rgb[(static_cast<size_t>(y) * img.width + x) * 3 + static_cast<size_t>(k)] = cur[x * static_cast<size_t>(channels) + static_cast<size_t>(k)];
    std::swap(prev, cur);
  }
  return img;
}

}  // namespace hotcold::test
