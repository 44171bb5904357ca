/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) for protocol/_speedups.pyx.
 *
 * The crc32c package has no C API to call from another extension, so the compiled SEND path
 * carries its own: the SSE4.2 crc32 instruction where the CPU has it (checked once, at run
 * time, so one build runs on any x86-64), else slicing-by-8 tables. The instruction has a
 * latency of three cycles and a throughput of one, so a buffer of three stripes or more runs
 * three independent CRCs side by side and joins them (a CRC is linear: the register after
 * A then B is the register after A shifted over |B| zero bytes, XOR the CRC of B from zero; the
 * shift by one stripe is four table lookups). Both continue from a
 * previous value exactly as crc32c.crc32c(data, value) does, and tests/protocol/
 * test_speedups_receipts.py checks both against that package on generated inputs.
 */
#ifndef MAGNETAR_CRC32C_H
#define MAGNETAR_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAGNETAR_CRC32C_POLY 0x82F63B78u

static uint32_t magnetar_crc32c_table[8][256];
static int magnetar_crc32c_hw = 0;

/* Bytes per stripe of the three-way hardware loop, and the tables shifting a CRC register over
 * that many zero bytes (byte k of the register through table k). */
#define MAGNETAR_CRC32C_STRIPE 4096
static uint32_t magnetar_crc32c_stripe_shift[4][256];

/* a(x) * b(x) modulo the polynomial, both in the reflected form (bit 31 is x^0). */
static uint32_t magnetar_crc32c_multiply(uint32_t a, uint32_t b)
{
    uint32_t product = 0;
    for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
        if (a & bit) {
            product ^= b;
        }
        b = (b >> 1) ^ (MAGNETAR_CRC32C_POLY & (0u - (b & 1u))); /* b *= x */
    }
    return product;
}

/* x^(2^k) mod p for k = 0..67: enough to shift over any 64-bit count of zero bytes (8 * count
 * bits: k up to 3 + 63). Filled by magnetar_crc32c_init. */
#define MAGNETAR_CRC32C_X2N 68
static uint32_t magnetar_crc32c_x2n[MAGNETAR_CRC32C_X2N];

/* x^(8 * count) mod p: the multiplier that moves a CRC register over count zero bytes. */
static uint32_t magnetar_crc32c_x8n(uint64_t count)
{
    uint32_t power = 1u << 31; /* x^0 */
    for (unsigned k = 3; count != 0; count >>= 1, k++) {
        if (count & 1u) {
            power = magnetar_crc32c_multiply(magnetar_crc32c_x2n[k], power);
        }
    }
    return power;
}

/* The CRC-32C of A followed by B, from crc(A), crc(B) and |B| (what crc32c(B, crc(A)) returns),
 * without reading B: the conditioning of both cancels, so only crc(A) is shifted over |B| bytes.
 * The storage flush uses it to take a record's CRCs from the entry's already verified checksum. */
static uint32_t magnetar_crc32c_combine_with(uint32_t power, uint32_t crc_a, uint32_t crc_b)
{
    return magnetar_crc32c_multiply(power, crc_a) ^ crc_b;
}

static uint32_t magnetar_crc32c_shift(uint32_t crc)
{
    return magnetar_crc32c_stripe_shift[0][crc & 0xFF] ^
           magnetar_crc32c_stripe_shift[1][(crc >> 8) & 0xFF] ^
           magnetar_crc32c_stripe_shift[2][(crc >> 16) & 0xFF] ^
           magnetar_crc32c_stripe_shift[3][crc >> 24];
}

static uint32_t magnetar_crc32c_sw(uint32_t value, const uint8_t *data, size_t size)
{
    uint32_t crc = ~value;
    /* Eight bytes per step: each table folds one byte position of the 64-bit word. */
    while (size >= 8) {
        uint32_t low, high;
        memcpy(&low, data, 4);
        memcpy(&high, data + 4, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        low = __builtin_bswap32(low);
        high = __builtin_bswap32(high);
#endif
        low ^= crc;
        crc = magnetar_crc32c_table[7][low & 0xFF] ^ magnetar_crc32c_table[6][(low >> 8) & 0xFF] ^
              magnetar_crc32c_table[5][(low >> 16) & 0xFF] ^ magnetar_crc32c_table[4][low >> 24] ^
              magnetar_crc32c_table[3][high & 0xFF] ^ magnetar_crc32c_table[2][(high >> 8) & 0xFF] ^
              magnetar_crc32c_table[1][(high >> 16) & 0xFF] ^ magnetar_crc32c_table[0][high >> 24];
        data += 8;
        size -= 8;
    }
    while (size--) {
        crc = magnetar_crc32c_table[0][(crc ^ *data++) & 0xFF] ^ (crc >> 8);
    }
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MAGNETAR_CRC32C_HAVE_HW 1
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t
magnetar_crc32c_sse42(uint32_t value, const uint8_t *data, size_t size)
{
    uint64_t crc = (uint32_t)~value;
    while (size >= 3 * MAGNETAR_CRC32C_STRIPE) {
        uint64_t second = 0, third = 0;
        for (size_t at = 0; at < MAGNETAR_CRC32C_STRIPE; at += 8) {
            uint64_t a, b, c;
            memcpy(&a, data + at, 8);
            memcpy(&b, data + MAGNETAR_CRC32C_STRIPE + at, 8);
            memcpy(&c, data + 2 * MAGNETAR_CRC32C_STRIPE + at, 8);
            crc = _mm_crc32_u64(crc, a);
            second = _mm_crc32_u64(second, b);
            third = _mm_crc32_u64(third, c);
        }
        crc = magnetar_crc32c_shift((uint32_t)crc) ^ (uint32_t)second;
        crc = magnetar_crc32c_shift((uint32_t)crc) ^ (uint32_t)third;
        data += 3 * MAGNETAR_CRC32C_STRIPE;
        size -= 3 * MAGNETAR_CRC32C_STRIPE;
    }
    while (size >= 8) {
        uint64_t word;
        memcpy(&word, data, 8);
        crc = _mm_crc32_u64(crc, word);
        data += 8;
        size -= 8;
    }
    uint32_t crc32 = (uint32_t)crc;
    while (size--) {
        crc32 = _mm_crc32_u8(crc32, *data++);
    }
    return ~crc32;
}
#endif

/* Fills the tables and detects the instruction; called once when the module loads. */
static void magnetar_crc32c_init(void)
{
    for (uint32_t byte = 0; byte < 256; byte++) {
        uint32_t crc = byte;
        for (int bit = 0; bit < 8; bit++) {
            crc = (crc >> 1) ^ (MAGNETAR_CRC32C_POLY & (0u - (crc & 1u)));
        }
        magnetar_crc32c_table[0][byte] = crc;
    }
    for (uint32_t byte = 0; byte < 256; byte++) {
        uint32_t crc = magnetar_crc32c_table[0][byte];
        for (int k = 1; k < 8; k++) {
            crc = magnetar_crc32c_table[0][crc & 0xFF] ^ (crc >> 8);
            magnetar_crc32c_table[k][byte] = crc;
        }
    }
    /* x^(8 * stripe) mod p, then the register's four bytes multiplied by it, table by table. */
    uint32_t stripe_power = 1u << 31;
    for (int bit = 0; bit < 8 * MAGNETAR_CRC32C_STRIPE; bit++) {
        stripe_power = (stripe_power >> 1) ^ (MAGNETAR_CRC32C_POLY & (0u - (stripe_power & 1u)));
    }
    for (uint32_t byte = 0; byte < 256; byte++) {
        for (int k = 0; k < 4; k++) {
            magnetar_crc32c_stripe_shift[k][byte] =
                magnetar_crc32c_multiply(stripe_power, byte << (8 * k));
        }
    }
    uint32_t power = 1u << 30; /* x^1 */
    for (int k = 0; k < MAGNETAR_CRC32C_X2N; k++) {
        magnetar_crc32c_x2n[k] = power;
        power = magnetar_crc32c_multiply(power, power);
    }
#ifdef MAGNETAR_CRC32C_HAVE_HW
    __builtin_cpu_init();
    magnetar_crc32c_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
}

static uint32_t magnetar_crc32c(uint32_t value, const uint8_t *data, size_t size)
{
#ifdef MAGNETAR_CRC32C_HAVE_HW
    if (magnetar_crc32c_hw) {
        return magnetar_crc32c_sse42(value, data, size);
    }
#endif
    return magnetar_crc32c_sw(value, data, size);
}

#endif /* MAGNETAR_CRC32C_H */
