package org.apache.rocketmq.store;
import java.io.*; import java.nio.MappedByteBuffer; import java.nio.channels.FileChannel;
/** Stand-in: the file mapped read-write at its full size, as the real MappedFile maps it. */
public class MappedFile {
    private final String fileName; private final MappedByteBuffer buf; private final RandomAccessFile raf;
    public MappedFile(String fileName, int size) throws IOException {
        this.fileName = fileName; new File(fileName).getParentFile().mkdirs();
        Long.parseLong(new File(fileName).getName());
        raf = new RandomAccessFile(fileName, "rw");
        buf = raf.getChannel().map(FileChannel.MapMode.READ_WRITE, 0, size);
    }
    public MappedByteBuffer getMappedByteBuffer() { return buf; } public String getFileName() { return fileName; }
    public boolean hold() { return true; } public void release() {}
    public boolean destroy(long i) { return new File(fileName).delete(); }
}
