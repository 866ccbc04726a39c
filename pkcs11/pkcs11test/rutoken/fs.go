package rutoken

import (
	"encoding/binary"
	"errors"
)

// The card's file system, as OpenSC's rtecp driver sees it: DFs, transparent
// EFs and internal objects (PINs and keys), each with its FCI's proprietary
// (85) and security (86) attributes kept as OpenSC wrote them.

// File descriptor bytes (the first byte of an FCI's 82).
const (
	descEF       = 0x01
	descDF       = 0x38
	descInternal = 0x10
)

// The MF and where the card puts key objects, by type, whatever DF is
// current when OpenSC creates them: OpenSC creates them without a path and
// later selects 3F00 1000 1000 6002 00kk (the driver's
// select_key_reference).
const mfID = 0x3F00

var (
	publicKeyDF  = []uint16{0x1000, 0x1000, 0x6001}
	privateKeyDF = []uint16{0x1000, 0x1000, 0x6002}
)

// secAttrSize is the length of the security attributes the driver insists
// on (SC_RTECP_SEC_ATTR_SIZE): any other length fails its select.
const secAttrSize = 15

// File is a DF, an EF or an internal object.
type File struct {
	ID   uint16  `json:"id"`
	Desc byte    `json:"desc"`
	Size int     `json:"size"`
	Prop []byte  `json:"prop,omitempty"` // 85
	Sec  []byte  `json:"sec"`            // 86, secAttrSize bytes
	Data []byte  `json:"data,omitempty"` // an EF's contents; a key's value
	Kids []*File `json:"kids,omitempty"` // a DF's files, in creation order
	Left int     `json:"left,omitempty"` // a PIN's tries left

	parent *File
}

func (f *File) isDF() bool { return f.Desc == descDF }

// child returns the file id in DF f, or nil.
func (f *File) child(id uint16) *File {
	for _, k := range f.Kids {
		if k.ID == id {
			return k
		}
	}
	return nil
}

// link sets the parent pointers below f (after a state is loaded).
func (f *File) link() {
	for _, k := range f.Kids {
		k.parent = f
		k.link()
	}
}

func (f *File) remove(k *File) {
	for i, x := range f.Kids {
		if x == k {
			f.Kids = append(f.Kids[:i:i], f.Kids[i+1:]...)
			return
		}
	}
}

// walk follows ids from f, or returns nil.
func (f *File) walk(ids []uint16) *File {
	for _, id := range ids {
		if f == nil || !f.isDF() {
			return nil
		}
		f = f.child(id)
	}
	return f
}

// fci is f's file control information as the driver reads it (6F with 80
// size, 82 descriptor, 83 FID, 85 proprietary and 86 security attributes).
func (f *File) fci() []byte {
	var b []byte
	b = tlv(b, 0x80, binary.BigEndian.AppendUint16(nil, uint16(f.Size)))
	b = tlv(b, 0x82, []byte{f.Desc, 0})
	b = tlv(b, 0x83, binary.BigEndian.AppendUint16(nil, f.ID))
	if len(f.Prop) > 0 {
		b = tlv(b, 0x85, f.Prop)
	}
	b = tlv(b, 0x86, f.Sec)
	return tlv(nil, 0x6F, b)
}

func tlv(b []byte, tag byte, v []byte) []byte {
	return append(append(b, tag, byte(len(v))), v...)
}

// parseTLVs reads simple one-byte tag, one-byte length TLVs.
func parseTLVs(b []byte) (map[byte][]byte, error) {
	m := map[byte][]byte{}
	for len(b) > 0 {
		if len(b) < 2 || len(b) < 2+int(b[1]) {
			return nil, errors.New("truncated TLV")
		}
		m[b[0]] = b[2 : 2+int(b[1])]
		b = b[2+int(b[1]):]
	}
	return m, nil
}

// fileFromFCI makes the file a CREATE FILE describes (6F ...).
func fileFromFCI(data []byte) (*File, error) {
	outer, err := parseTLVs(data)
	if err != nil {
		return nil, err
	}
	inner, ok := outer[0x62]
	if !ok {
		inner, ok = outer[0x6F]
	}
	if !ok {
		return nil, errors.New("no FCI template")
	}
	m, err := parseTLVs(inner)
	if err != nil {
		return nil, err
	}
	id, desc := m[0x83], m[0x82]
	if len(id) != 2 || len(desc) < 1 {
		return nil, errors.New("no file ID or descriptor")
	}
	f := &File{ID: binary.BigEndian.Uint16(id), Desc: desc[0], Prop: clone(m[0x85]), Sec: clone(m[0x86])}
	if s := m[0x80]; len(s) == 2 {
		f.Size = int(binary.BigEndian.Uint16(s))
	}
	switch f.Desc {
	case descDF, descEF, descInternal:
	default:
		return nil, errors.New("unknown file descriptor")
	}
	if len(f.Sec) != secAttrSize {
		f.Sec = append(f.Sec, make([]byte, secAttrSize)...)[:secAttrSize]
	}
	if f.Desc == descEF {
		f.Data = make([]byte, f.Size)
	}
	return f, nil
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
