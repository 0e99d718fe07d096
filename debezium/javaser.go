package debezium

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Debezium Server (and Kafka Connect standalone) keep offsets in a file
// written by Kafka's FileOffsetBackingStore: one Java-serialized
// java.util.HashMap<byte[], byte[]>, each key and value being the UTF-8
// JSON the offsets topic would hold. Java object serialization of such a
// map is, byte for byte:
//
//	AC ED 00 05                       stream magic, version 5
//	73 72 00 11 "java.util.HashMap"   TC_OBJECT, TC_CLASSDESC, class name
//	05 07 DA C1 C3 16 60 D1           serialVersionUID
//	03 00 02                          flags (WRITE_METHOD|SERIALIZABLE), 2 fields
//	46 00 0A "loadFactor"             float field
//	49 00 09 "threshold"              int field
//	78 70                             end of class annotations, no superclass
//	3F 40 00 00  00 00 00 0C          loadFactor 0.75, threshold
//	77 08 <capacity:4> <size:4>       block data written by HashMap.writeObject
//	size × (key, value), each one of
//	  75 72 00 02 "[B" <uid:8> 02 00 00 78 70 <len:4> <bytes>   first byte[]: TC_ARRAY with its class
//	  75 71 00 7E 00 02 <len:4> <bytes>                        later byte[]: class by back-reference
//	  70                                                        null (a deleted offset)
//	78                                                          end of block data
//
// readJavaOffsets decodes exactly that shape; anything else is refused
// with the byte offset where it differs, rather than guessed at.

var javaMagic = []byte{0xAC, 0xED, 0x00, 0x05}

const (
	tcNull      = 0x70
	tcReference = 0x71
	tcClassDesc = 0x72
	tcObject    = 0x73
	tcArray     = 0x75
	tcBlockData = 0x77
	tcEndBlock  = 0x78
	baseHandle  = 0x7E0000
)

type javaReader struct {
	b   []byte
	off int
	// handles of the serialized objects seen so far, by kind: the class
	// descriptor of byte[] and the byte arrays themselves (a writer may
	// refer back to an array it already wrote).
	handles   int
	byteClass int // handle of the "[B" class descriptor, -1 until seen
	arrays    map[int][]byte
}

func (r *javaReader) fail(format string, args ...any) error {
	return fmt.Errorf("%w: Java-serialized offset file, byte %d: %s", ErrBadOffset, r.off, fmt.Sprintf(format, args...))
}

func (r *javaReader) u8() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.fail("file ends early")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *javaReader) take(n int) ([]byte, error) {
	if n < 0 || r.off+n > len(r.b) {
		return nil, r.fail("file ends early (want %d more bytes, have %d)", n, len(r.b)-r.off)
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p, nil
}

func (r *javaReader) u16() (int, error) {
	p, err := r.take(2)
	if err != nil {
		return 0, err
	}
	return int(binary.BigEndian.Uint16(p)), nil
}

func (r *javaReader) u32() (uint32, error) {
	p, err := r.take(4)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(p), nil
}

func (r *javaReader) expect(c byte, what string) error {
	got, err := r.u8()
	if err != nil {
		return err
	}
	if got != c {
		r.off--
		return r.fail("want %s (0x%02X), found 0x%02X", what, c, got)
	}
	return nil
}

func (r *javaReader) utf() (string, error) {
	n, err := r.u16()
	if err != nil {
		return "", err
	}
	p, err := r.take(n)
	return string(p), err
}

func (r *javaReader) newHandle() int {
	h := baseHandle + r.handles
	r.handles++
	return h
}

// readJavaOffsets returns the offset records of a FileOffsetBackingStore
// file, in the order they are stored (HashMap order: meaningless).
func readJavaOffsets(b []byte) ([]record, error) {
	r := &javaReader{b: b, off: len(javaMagic), byteClass: -1, arrays: map[int][]byte{}}
	if err := r.expect(tcObject, "TC_OBJECT"); err != nil {
		return nil, err
	}
	if err := r.expect(tcClassDesc, "TC_CLASSDESC"); err != nil {
		return nil, err
	}
	name, err := r.utf()
	if err != nil {
		return nil, err
	}
	if name != "java.util.HashMap" {
		return nil, r.fail("the serialized object is a %s, not the java.util.HashMap FileOffsetBackingStore writes", name)
	}
	if _, err := r.take(8 + 1); err != nil { // serialVersionUID, flags
		return nil, err
	}
	nfields, err := r.u16()
	if err != nil {
		return nil, err
	}
	fieldBytes := 0
	for range nfields {
		typ, err := r.u8()
		if err != nil {
			return nil, err
		}
		if _, err := r.utf(); err != nil {
			return nil, err
		}
		switch typ {
		case 'F', 'I':
			fieldBytes += 4
		default:
			return nil, r.fail("unexpected HashMap field type %q", typ)
		}
	}
	if err := r.expect(tcEndBlock, "TC_ENDBLOCKDATA after the class annotations"); err != nil {
		return nil, err
	}
	if err := r.expect(tcNull, "TC_NULL (no superclass)"); err != nil {
		return nil, err
	}
	r.newHandle() // the class descriptor
	r.newHandle() // the map itself
	if _, err := r.take(fieldBytes); err != nil {
		return nil, err
	}
	if err := r.expect(tcBlockData, "TC_BLOCKDATA with the map's capacity and size"); err != nil {
		return nil, err
	}
	n, err := r.u8()
	if err != nil {
		return nil, err
	}
	if n != 8 {
		return nil, r.fail("block data of %d bytes, want 8 (capacity, size)", n)
	}
	if _, err := r.u32(); err != nil { // capacity
		return nil, err
	}
	size, err := r.u32()
	if err != nil {
		return nil, err
	}
	if size > 1<<20 {
		return nil, r.fail("map claims %d entries", size)
	}
	recs := make([]record, 0, size)
	for i := range int(size) {
		k, err := r.byteArray()
		if err != nil {
			return nil, err
		}
		v, err := r.byteArray()
		if err != nil {
			return nil, err
		}
		if k == nil {
			return nil, r.fail("entry %d has a null key", i)
		}
		recs = append(recs, record{key: string(k), value: v})
	}
	if err := r.expect(tcEndBlock, "TC_ENDBLOCKDATA after the last entry"); err != nil {
		return nil, err
	}
	if r.off != len(r.b) {
		return nil, r.fail("%d unexpected bytes after the map", len(r.b)-r.off)
	}
	return recs, nil
}

// byteArray reads a byte[] (or null). A nil result with no error is a
// Java null; an empty array is returned as a non-nil empty slice.
func (r *javaReader) byteArray() ([]byte, error) {
	tc, err := r.u8()
	if err != nil {
		return nil, err
	}
	switch tc {
	case tcNull:
		return nil, nil
	case tcReference:
		h, err := r.u32()
		if err != nil {
			return nil, err
		}
		if a, ok := r.arrays[int(h)]; ok {
			return a, nil
		}
		return nil, r.fail("back-reference 0x%X is not a byte array seen before", h)
	case tcArray:
	default:
		r.off--
		return nil, r.fail("want a byte[] (TC_ARRAY) or null, found 0x%02X", tc)
	}
	// The array's class: the first time a full descriptor, then a reference.
	tc, err = r.u8()
	if err != nil {
		return nil, err
	}
	switch tc {
	case tcClassDesc:
		name, err := r.utf()
		if err != nil {
			return nil, err
		}
		if name != "[B" {
			return nil, r.fail("array of class %q, want byte[] ([B)", name)
		}
		if _, err := r.take(8 + 1); err != nil { // serialVersionUID, flags
			return nil, err
		}
		if nf, err := r.u16(); err != nil {
			return nil, err
		} else if nf != 0 {
			return nil, r.fail("byte[] class with %d fields", nf)
		}
		if err := r.expect(tcEndBlock, "TC_ENDBLOCKDATA"); err != nil {
			return nil, err
		}
		if err := r.expect(tcNull, "TC_NULL (no superclass)"); err != nil {
			return nil, err
		}
		r.byteClass = r.newHandle()
	case tcReference:
		h, err := r.u32()
		if err != nil {
			return nil, err
		}
		if int(h) != r.byteClass {
			return nil, r.fail("array class reference 0x%X is not byte[]", h)
		}
	default:
		r.off--
		return nil, r.fail("want the byte[] class descriptor, found 0x%02X", tc)
	}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	if n > 1<<24 {
		return nil, r.fail("byte[] of %d bytes", n)
	}
	p, err := r.take(int(n))
	if err != nil {
		return nil, err
	}
	a := bytes.Clone(p)
	if a == nil {
		a = []byte{}
	}
	r.arrays[r.newHandle()] = a
	return a, nil
}
