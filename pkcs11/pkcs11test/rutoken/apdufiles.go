package rutoken

import "encoding/binary"

// The file system's commands (fs.go is the tree): SELECT (by FID, by path,
// the file listing, the parent), READ and UPDATE BINARY, CREATE and DELETE
// FILE, and what a file's proprietary attributes say it is.

// choose makes f the current file (and its DF the current DF).
func (c *Card) choose(f *File) {
	c.cur = f
	if f.isDF() {
		c.curDF = f
	} else if f.parent != nil {
		c.curDF = f.parent
	}
}

func (c *Card) selectFile(a command) []byte {
	if c.st.MF == nil || c.curDF == nil {
		return word(swNotFound)
	}
	var f *File
	direct := false // by FID or path, not the listing's first or next
	switch {
	case a.p1 == 0x00 && a.p2 == 0x02 && len(a.data) == 2:
		// The next file after FID in the current DF (the file listing).
		id := binary.BigEndian.Uint16(a.data)
		for i, k := range c.curDF.Kids {
			if k.ID == id && i+1 < len(c.curDF.Kids) {
				f = c.curDF.Kids[i+1]
			}
		}
	case a.p1 == 0x00 && len(a.data) == 0:
		// The first file of the current DF (the file listing).
		if len(c.curDF.Kids) > 0 {
			f = c.curDF.Kids[0]
		}
	case a.p1 == 0x00 && len(a.data) == 2:
		direct = true
		id := binary.BigEndian.Uint16(a.data)
		switch {
		case id == mfID:
			f = c.st.MF
		case c.curDF.child(id) != nil:
			f = c.curDF.child(id)
		case c.curDF.ID == id:
			f = c.curDF
		case c.curDF.parent != nil && c.curDF.parent.child(id) != nil:
			f = c.curDF.parent.child(id)
		}
	case a.p1 == 0x03:
		if c.curDF.parent == nil {
			return word(swNotFound)
		}
		c.choose(c.curDF.parent)
		return word(swOK)
	case a.p1 == 0x08 && len(a.data)%2 == 0 && len(a.data) > 0:
		ids := make([]uint16, len(a.data)/2)
		for i := range ids {
			ids[i] = binary.BigEndian.Uint16(a.data[2*i:])
		}
		f = c.st.MF.walk(ids)
		direct = true
	default:
		return word(swWrongP1P2)
	}
	if f == nil {
		return word(swNotFound)
	}
	if direct && c.selectKeyFault != 0 && f.Desc == descInternal && isKey(f) && !isPublicKey(f) {
		return word(c.selectKeyFault)
	}
	c.choose(f)
	if a.p2&0x0C == 0x0C {
		return word(swOK)
	}
	return ok(f.fci())
}

func (c *Card) currentEF() *File {
	if c.cur == nil || c.cur.Desc != descEF {
		return nil
	}
	return c.cur
}

func (c *Card) readBinary(a command) []byte {
	f := c.currentEF()
	if f == nil || a.p1&0x80 != 0 {
		return word(swNoEF)
	}
	off := int(a.p1)<<8 | int(a.p2)
	switch {
	case off > len(f.Data):
		return word(swOffset)
	case off == len(f.Data):
		return word(swEndOfFile)
	}
	end := min(off+a.le, len(f.Data))
	if a.le == 0 {
		end = len(f.Data)
	}
	return ok(f.Data[off:end])
}

func (c *Card) updateBinary(a command) []byte {
	f := c.currentEF()
	if f == nil || a.p1&0x80 != 0 {
		return word(swNoEF)
	}
	off := int(a.p1)<<8 | int(a.p2)
	if off+len(a.data) > len(f.Data) {
		return word(swNoSpace)
	}
	copy(f.Data[off:], a.data)
	return c.changed(word(swOK))
}

// isKey tells a key object by its proprietary attributes' first
// byte: 03/13 GOST private/public, 23/33 RSA private/public; PINs are 01.
func isKey(f *File) bool { return len(f.Prop) > 0 && f.Prop[0]&0x0F == 3 }

func isPublicKey(f *File) bool { return f.Prop[0]&0x10 != 0 }

func isGOSTKey(f *File) bool { return f.Prop[0]&0x20 == 0 }

func isPIN(f *File) bool { return len(f.Prop) >= 4 && f.Prop[0] == 0x01 }

func (c *Card) createFile(a command) []byte {
	f, err := fileFromFCI(a.data)
	if err != nil {
		return word(swWrongData)
	}
	switch {
	case f.ID == mfID && f.isDF():
		if c.st.MF != nil {
			return word(swExists)
		}
		c.st.MF = f
		c.choose(f)
		return c.changed(word(swOK))
	case f.Desc == descInternal && isPIN(f):
		if c.pin(byte(f.ID)) != nil {
			return word(swExists)
		}
		f.Left = int(f.Prop[3] & 0x0F)
		c.st.PINs = append(c.st.PINs, f)
		return c.changed(word(swOK))
	}
	dir := c.curDF
	if f.Desc == descInternal && isKey(f) {
		ids := privateKeyDF
		if isPublicKey(f) {
			ids = publicKeyDF
		}
		dir = c.st.MF.walk(ids)
	}
	if dir == nil || !dir.isDF() {
		return word(swNotFound)
	}
	if dir.child(f.ID) != nil {
		return word(swExists)
	}
	f.parent = dir
	dir.Kids = append(dir.Kids, f)
	c.choose(f)
	return c.changed(word(swOK))
}

func (c *Card) deleteFile(a command) []byte {
	f := c.cur
	if len(a.data) == 2 {
		f = nil
		if c.curDF != nil {
			f = c.curDF.child(binary.BigEndian.Uint16(a.data))
		}
	}
	if f == nil || f.parent == nil {
		return word(swNotFound)
	}
	f.parent.remove(f)
	c.choose(f.parent)
	return c.changed(word(swOK))
}
