// Kafka 4.3.1's own share-group SimpleAssignor, driven from stdin: the oracle the Python port is
// compared with (tests/unit/assignors/test_simple_assignor_oracle.py). Input, per case:
//   T <name> <uuid hex> <partitions>         a topic
//   M <member> <name,name|-> <uuid:p.p;..|->  a member: subscribed names, current assignment
//   A <uuid hex> <p.p.p|->                   optional: the topic's assignable (initialized)
//                                            partitions; with any A line, topics without one
//                                            have none (Kafka's topicPartitionAllowedMap)
//   END
// Output, per case: "M <member> <uuid:p.p;...>" lines (topics and partitions sorted), then END.
// Members and assignments are built the way Kafka's coordinator builds them: a HashMap of member
// specs in member order, subscriptions as TopicIds over a HashSet of names, assignments as
// Assignment.fromRecord does (a HashMap of HashSets).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.*;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.common.runtime.CoordinatorMetadataImage;
import org.apache.kafka.coordinator.group.api.assignor.*;
import org.apache.kafka.coordinator.group.assignor.SimpleAssignor;
import org.apache.kafka.coordinator.group.modern.*;

public class SimpleAssignorOracle {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        Map<String, Uuid> ids = new HashMap<>();
        Map<Uuid, String> names = new HashMap<>();
        Map<Uuid, Integer> counts = new HashMap<>();
        List<String[]> members = new ArrayList<>();
        Map<Uuid, Set<Integer>> allowed = new HashMap<>();
        boolean[] restricted = {false};
        String line;
        StringBuilder out = new StringBuilder();
        while ((line = in.readLine()) != null) {
            String[] f = line.split(" ");
            if (f[0].equals("T")) {
                Uuid id = uuid(f[2]);
                ids.put(f[1], id); names.put(id, f[1]); counts.put(id, Integer.parseInt(f[3]));
            } else if (f[0].equals("M")) {
                members.add(f);
            } else if (f[0].equals("A")) {
                Set<Integer> parts = new HashSet<>();
                if (!f[2].equals("-")) for (String p : f[2].split("\\.")) parts.add(Integer.parseInt(p));
                allowed.put(uuid(f[1]), parts);
                restricted[0] = true;
            } else if (f[0].equals("END")) {
                out.append(run(ids, names, counts, members,
                    restricted[0] ? Optional.of(new HashMap<>(allowed)) : Optional.empty()));
                ids.clear(); names.clear(); counts.clear(); members.clear(); allowed.clear();
                restricted[0] = false;
            }
        }
        System.out.print(out);
    }

    static Uuid uuid(String hex) {  // 32 hex digits, as Python's uuid.UUID(...).hex
        return new Uuid(Long.parseUnsignedLong(hex.substring(0, 16), 16), Long.parseUnsignedLong(hex.substring(16), 16));
    }

    static String hex(Uuid id) {
        return String.format("%016x%016x", id.getMostSignificantBits(), id.getLeastSignificantBits());
    }

    static String run(Map<String, Uuid> ids, Map<Uuid, String> names, Map<Uuid, Integer> counts, List<String[]> members,
                      Optional<Map<Uuid, Set<Integer>>> allowed) {
        TopicIds.TopicResolver resolver = new TopicIds.TopicResolver() {
            public CoordinatorMetadataImage image() { return null; }
            public String name(Uuid id) { return names.get(id); }
            public Uuid id(String name) { return ids.get(name); }
            public void clear() { }
        };
        Map<String, MemberSubscriptionAndAssignmentImpl> specs = new HashMap<>();
        Set<Set<String>> subscriptions = new HashSet<>();
        for (String[] m : members) {
            List<String> subscribed = m[2].equals("-") ? List.of() : Arrays.asList(m[2].split(","));
            subscriptions.add(new HashSet<>(subscribed));
            List<Map.Entry<Uuid, List<Integer>>> record = new ArrayList<>();
            if (!m[3].equals("-")) {
                for (String t : m[3].split(";")) {
                    String[] tp = t.split(":", -1);
                    List<Integer> parts = new ArrayList<>();
                    if (!tp[1].isEmpty()) for (String p : tp[1].split("\\.")) parts.add(Integer.parseInt(p));
                    record.add(Map.entry(uuid(tp[0]), parts));
                }
            }
            Map<Uuid, Set<Integer>> assigned = new HashMap<>();  // Collectors.toMap
            for (Map.Entry<Uuid, List<Integer>> e : record) assigned.put(e.getKey(), new HashSet<>(e.getValue()));
            specs.put(m[1], new MemberSubscriptionAndAssignmentImpl(Optional.empty(), Optional.empty(),
                new TopicIds(new HashSet<>(subscribed), resolver), new Assignment(assigned)));
        }
        SubscriptionType type = subscriptions.size() <= 1 ? SubscriptionType.HOMOGENEOUS : SubscriptionType.HETEROGENEOUS;
        SubscribedTopicDescriber describer = new SubscribedTopicDescriber() {
            public int numPartitions(Uuid topicId) { return counts.getOrDefault(topicId, -1); }
            public Set<String> racksForPartition(Uuid topicId, int partition) { return Set.of(); }
        };
        GroupAssignment result = new SimpleAssignor().assign(
            new GroupSpecImpl(Collections.unmodifiableMap(specs), type, new HashMap<>(), allowed), describer);
        StringBuilder sb = new StringBuilder();
        for (String[] m : members) {
            MemberAssignment ma = result.members().get(m[1]);
            TreeMap<String, TreeSet<Integer>> sorted = new TreeMap<>();
            if (ma != null) ma.partitions().forEach((t, ps) -> sorted.put(hex(t), new TreeSet<>(ps)));
            List<String> parts = new ArrayList<>();
            sorted.forEach((t, ps) -> {
                StringJoiner j = new StringJoiner(".");
                ps.forEach(p -> j.add(Integer.toString(p)));
                parts.add(t + ":" + j);
            });
            sb.append("M ").append(m[1]).append(' ').append(parts.isEmpty() ? "-" : String.join(";", parts)).append('\n');
        }
        return sb.append("END\n").toString();
    }
}
