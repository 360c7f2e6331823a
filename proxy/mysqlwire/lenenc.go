package mysqlwire

import "encoding/binary"

// AppendLenEnc appends n as a length-encoded integer.
func AppendLenEnc(b []byte, n uint64) []byte {
	switch {
	case n < 251:
		return append(b, byte(n))
	case n < 1<<16:
		return append(b, 0xfc, byte(n), byte(n>>8))
	case n < 1<<24:
		return append(b, 0xfd, byte(n), byte(n>>8), byte(n>>16))
	default:
		b = append(b, 0xfe)
		return binary.LittleEndian.AppendUint64(b, n)
	}
}

// AppendLenEncString appends s as a length-encoded string.
func AppendLenEncString(b []byte, s []byte) []byte {
	b = AppendLenEnc(b, uint64(len(s)))
	return append(b, s...)
}

// ReadLenEnc decodes a length-encoded integer at b[0:]: its value and its
// size in bytes. ok is false when b is too short or starts with 0xff;
// null reports the 0xfb NULL marker.
func ReadLenEnc(b []byte) (n uint64, size int, null, ok bool) {
	if len(b) == 0 {
		return 0, 0, false, false
	}
	switch b[0] {
	case 0xfb:
		return 0, 1, true, true
	case 0xfc:
		if len(b) < 3 {
			return 0, 0, false, false
		}
		return uint64(binary.LittleEndian.Uint16(b[1:])), 3, false, true
	case 0xfd:
		if len(b) < 4 {
			return 0, 0, false, false
		}
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4, false, true
	case 0xfe:
		if len(b) < 9 {
			return 0, 0, false, false
		}
		return binary.LittleEndian.Uint64(b[1:]), 9, false, true
	case 0xff:
		return 0, 0, false, false
	default:
		return uint64(b[0]), 1, false, true
	}
}

// ReadLenEncString decodes a length-encoded string at b[0:]: its bytes
// (aliasing b) and the size of the whole. ok is false when b is too short
// or holds NULL.
func ReadLenEncString(b []byte) (s []byte, size int, ok bool) {
	n, k, null, ok := ReadLenEnc(b)
	if !ok || null || uint64(len(b)-k) < n {
		return nil, 0, false
	}
	return b[k : k+int(n)], k + int(n), true
}
