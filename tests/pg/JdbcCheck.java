import java.sql.*;
import java.util.*;

/**
 * weir through the PostgreSQL JDBC driver, as a Java program (or a BI tool) talks to Postgres:
 * statements, prepared statements run past the driver's threshold for server-side statements
 * (binary rows from then on), an updating query's final rows, an error's SQLSTATE, and the
 * tables its metadata lists. Exits non-zero on the first thing not as expected. Arguments:
 * host, port, token (the password). Run after psycopg_check.py, on the same server.
 */
public class JdbcCheck {
    static void check(String what, Object actual, Object expected) {
        if (!Objects.equals(actual, expected)) {
            System.err.println("jdbc: " + what + ": " + actual + ", expected " + expected);
            System.exit(1);
        }
        System.out.println("jdbc: " + what + ": ok");
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1] + "/weir";
        try (Connection conn = DriverManager.getConnection(url, "weir", args[2])) {
            try (Statement st = conn.createStatement()) {
                st.execute("CREATE TABLE IF NOT EXISTS nx WITH (connector = 'nexmark', events = '200', as_fast_as_possible = 'true')");
            }
            try (PreparedStatement ps = conn.prepareStatement("SELECT person.id, person.name FROM nx WHERE event_type = 0 AND person.id < ?")) {
                ps.setLong(1, 1002L);
                List<String> people = new ArrayList<>();
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) people.add(rs.getLong(1) + " " + rs.getString(2));
                }
                Collections.sort(people);
                check("rows with a bound parameter", people, List.of("1000 Walter Abrams", "1001 Deiter White"));
            }
            try (PreparedStatement ps = conn.prepareStatement("SELECT count(*) FROM nx WHERE event_type = ?")) {
                long[] expected = {4, 12, 184};
                for (int run = 0; run < 6; run++) {
                    int kind = run % 3;
                    ps.setInt(1, kind);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        check("count of kind " + kind + " (run " + run + ")", rs.getLong(1), expected[kind]);
                    }
                }
            }
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT event_type, count(*) FROM nx GROUP BY event_type")) {
                List<String> counts = new ArrayList<>();
                while (rs.next()) counts.add(rs.getInt(1) + ":" + rs.getLong(2));
                Collections.sort(counts);
                check("an updating query's final rows", counts, List.of("0:4", "1:12", "2:184"));
            }
            try (Statement st = conn.createStatement()) {
                st.executeQuery("SELECT nope FROM nx");
                check("an unknown column is an error", false, true);
            } catch (SQLException e) {
                check("an unknown column's SQLSTATE", e.getSQLState(), "42703");
            }
            DatabaseMetaData meta = conn.getMetaData();
            List<String> tables = new ArrayList<>();
            try (ResultSet rs = meta.getTables(null, "public", "%", new String[] {"TABLE"})) {
                while (rs.next()) tables.add(rs.getString("TABLE_NAME"));
            }
            check("the tables JDBC's metadata lists include nx", tables.contains("nx"), true);
        }
        System.out.println("jdbc: all ok");
    }
}
